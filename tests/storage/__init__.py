"""Tests of IPFS storage: codecs, the embedded node over HTTP, and the Storage client."""
