"""RPC routes about the node itself: version and id."""

import platform
from importlib import metadata

from fastapi import APIRouter

from marketplace.ipfs.api.deps import RepoDep

router = APIRouter(tags=["node"])

# The Kubo release whose RPC request and response shapes this node follows. Clients that gate
# on the version (ipfshttpclient.connect refuses anything from 0.8 on) treat it as that Kubo.
KUBO_RPC_VERSION = "0.32.1"
REPO_VERSION = "16"


@router.post("/version")
def version() -> dict:
    return {
        "Version": KUBO_RPC_VERSION,
        "Commit": "",
        "Repo": REPO_VERSION,
        "System": f"{platform.machine()}/{platform.system().lower()}",
        "Golang": f"python{platform.python_version()}",
    }


@router.post("/id")
def node_id(repo: RepoDep) -> dict:
    return {
        "ID": repo.peer_id,
        "PublicKey": "",
        "Addresses": [],
        "AgentVersion": f"zoo-compute/{metadata.version('zoo-compute')}",
        "ProtocolVersion": "ipfs/0.1.0",
        "Protocols": [],
    }
