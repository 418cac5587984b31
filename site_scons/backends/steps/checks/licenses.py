"""License texts have content: every file under share/licenses/ holds at least one visible
character. An origin whose `LICENSE` is empty (or only blank lines, a byte-order mark, NULs)
would otherwise ship a package whose required text is there by name and says nothing."""
from __future__ import annotations

import codecs

from backends.binfmt.scan import CHUNK
from backends.model.recipe_kit import LICENSE_ROOT
from backends.steps.checks.view import ArchiveView

# Byte-order marks, longest first (UTF-32's little-endian mark starts with UTF-16's).
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"), (codecs.BOM_UTF8, "utf-8"),
         (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


def check_license_texts(view: ArchiveView) -> list[str]:
    texts = sorted(name for name in view.names if name.startswith(LICENSE_ROOT + "/"))
    problems = []
    for name in texts:
        member = view.follow(name)
        if member is not None and not has_content(view, member):
            problems.append(f"license text {name} is empty or only whitespace: a package carries the text itself "
                            "(docs/licenses-and-provenance.md)")
    return problems


def has_content(view: ArchiveView, name: str) -> bool:
    """Whether the member holds a printable character other than whitespace, in the encoding
    its byte-order mark names (UTF-8 without one; undecodable bytes count as content). Read
    only as far as the first such character."""
    with view.open(name) as stream:
        chunk = stream.read(CHUNK)
        encoding = next((codec for bom, codec in _BOMS if chunk.startswith(bom)), "utf-8")
        decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
        while chunk:
            if any(char.isprintable() and not char.isspace() for char in decoder.decode(chunk)):
                return True
            chunk = stream.read(CHUNK)
        return any(char.isprintable() and not char.isspace() for char in decoder.decode(b"", final=True))
