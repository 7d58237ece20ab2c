"""The streaming data pipeline: documents from JSONL, Parquet or text files, filtered, deduplicated
and tokenized into a token file, with memory bounded by a buffer, not by the corpus.

    stats = Pipeline(encoder, filters, dedup).run(documents(kind, file, field), out)

`node.engine.data` runs it for a job's document sources and samples batches from the tokens.
"""

from .dedup import Deduplicator
from .documents import MAX_DOCUMENT_BYTES, documents
from .errors import PipelineError
from .pipeline import ByteEncoder, Pipeline, PipelineStats, TokenizerEncoder
from .quality import QualityFilter

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "ByteEncoder",
    "Deduplicator",
    "Pipeline",
    "PipelineError",
    "PipelineStats",
    "QualityFilter",
    "TokenizerEncoder",
    "documents",
]
