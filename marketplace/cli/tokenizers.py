"""`zoo-compute tokenizers`: train the tokenizer a job spec names by CID."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console

from marketplace.config import Settings
from marketplace.jobs import pin
from marketplace.protocol import tokenizer
from marketplace.storage import Storage

if TYPE_CHECKING:
    from node.data.documents import DocumentKind

console = Console()
# by suffix; any other file is text
READERS: dict[str, DocumentKind] = {".jsonl": "jsonl", ".parquet": "parquet"}


@click.group()
def tokenizers() -> None:
    """Tokenizers for document data sources (`data.tokenizer` in a job spec)."""


@tokenizers.command()
@click.option(
    "--kind",
    type=click.Choice(["bpe", "unigram"]),
    default="bpe",
    show_default=True,
    help="Byte-level BPE, or a unigram model over byte-level pieces.",
)
@click.option(
    "--vocab-size",
    required=True,
    type=click.IntRange(257, 1 << 20),
    help="Tokens to learn, the 256 bytes and <|endoftext|> included.",
)
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the tokenizer.json.",
)
@click.option(
    "--field",
    default="text",
    show_default=True,
    help="JSONL field or Parquet column holding the text.",
)
@click.option(
    "--add",
    is_flag=True,
    help="Also add it to the IPFS node at ZOO_IPFS_API, pin it, and print its CID.",
)
@click.argument(
    "files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
def train(
    kind: tokenizer.TokenizerKind,
    vocab_size: int,
    out: Path,
    field: str,
    add: bool,
    files: tuple[Path, ...],
) -> None:
    """Train a tokenizer on FILES: .jsonl and .parquet files read as the pipeline reads them,
    any other file as plain text, one document per paragraph."""
    from node.data import PipelineError, documents

    def texts():
        for path in files:
            with path.open("rb") as f:
                yield from documents(READERS.get(path.suffix, "text"), f, field)

    try:
        trained = tokenizer.train(kind, vocab_size, texts())
    except PipelineError as exc:
        raise click.ClickException(str(exc)) from None
    raw = trained.to_str().encode()
    out.write_bytes(raw)
    size = trained.get_vocab_size()
    console.print(f"{kind} tokenizer of {size} tokens written to {out}", soft_wrap=True)
    if add:
        settings = Settings()
        with Storage(settings.ipfs_api, settings.ipfs_replicas) as storage:
            cid = pin(storage, raw)
        console.print(f"added as {cid}; in a job spec:", soft_wrap=True)
        console.print(
            f"  data:\n    tokenizer: {{cid: {cid}, vocab_size: {size}}}",
            highlight=False,
            soft_wrap=True,
        )
