"""An ELF shared object's dynamic facts read from its own tables (binfmt/elf.py),
against what llvm-nm and llvm-readobj say (binfmt/inspect.py), on tiny libraries made here for
every word size, byte order and hash table; read from a file, and from a stream that is
read once and only as far as the tables lie. Real registry libraries:
tests/e2e/test_elf_symbols_real.py."""
from __future__ import annotations

import hashlib
import io
import subprocess
from pathlib import Path

import pytest

from backends.binfmt import elf as elf_symbols
from backends.binfmt.elf import Behind, ElfError, Sequential, dynamic_facts
from backends.binfmt.inspect import (
    elf_version_definitions, exported_symbols, library_identity, needed_libraries, symbol_sets,
)

SOURCE = """
int exported_data = 1;
__attribute__((weak)) void weak_function(void) {}
__attribute__((visibility("hidden"))) void hidden_function(void) {}
static void local_function(void) {}
extern void undefined_function(void);
void exported_function(void) { local_function(); hidden_function(); undefined_function(); }
void old_function(void) {}
__asm__(".symver old_function, old_function@VERS_1.0");
"""
VERSIONS = "VERS_1.0 { global: old_function; }; VERS_2.0 { global: *; } VERS_1.0;\n"
# (clang target, hash style): 64- and 32-bit, little- and big-endian, GNU and SysV hash tables.
TARGETS = {"x86_64": ("x86_64-linux-gnu", "gnu"), "aarch64": ("aarch64-linux-gnu", "sysv"),
           "i386": ("i386-linux-gnu", "both"), "armv7": ("armv7-linux-gnueabihf", "gnu"),
           "ppc64be": ("powerpc64-linux-gnu", "gnu"), "mips32be": ("mips-linux-gnu", "sysv")}


def shared_object(work: Path, target: str, hash_style: str, needed: Path | None = None) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    (work / "f.c").write_text(SOURCE)
    (work / "f.map").write_text(VERSIONS)
    subprocess.run(["clang", "-target", target, "-fPIC", "-c", work / "f.c", "-o", work / "f.o"], check=True)
    out = work / "libfixture.so.2"
    subprocess.run(["ld.lld", "-shared", "-o", out, work / "f.o", "-soname", "libfixture.so.2",
                    f"--hash-style={hash_style}", "--version-script", work / "f.map",
                    *([needed] if needed else [])], check=True)
    return out


@pytest.fixture(scope="module", params=sorted(TARGETS))
def library(request, tmp_path_factory) -> Path:
    target, hash_style = TARGETS[request.param]
    work = tmp_path_factory.mktemp(request.param)
    dependency = shared_object(work / "dep", target, hash_style)
    return shared_object(work, target, hash_style, needed=dependency)


def test_the_facts_are_what_llvm_nm_and_llvm_readobj_read(library):
    with open(library, "rb") as stream:
        facts = elf_symbols.from_file(stream)
    assert facts.defined == exported_symbols(library) == symbol_sets(library)[0]
    assert list(facts.needed) == needed_libraries(library) == ["libfixture.so.2"]
    assert facts.soname == library_identity(library) == "libfixture.so.2"
    assert list(facts.version_definitions) == elf_version_definitions(library) == ["VERS_1.0", "VERS_2.0"]


def test_only_defined_global_symbols_without_their_versions(library):
    defined = elf_symbols.from_bytes(library.read_bytes()).defined
    assert {"exported_function", "exported_data", "weak_function", "old_function"} <= defined
    assert not defined & {"undefined_function", "hidden_function", "local_function", ""}
    assert not any("@" in name for name in defined)


def test_a_stream_is_read_only_as_far_as_the_tables_lie(tmp_path):
    """Padding behind the dynamic segment is never read; every byte read is observed."""
    library = shared_object(tmp_path, *TARGETS["x86_64"])
    data = library.read_bytes() + bytes(8 << 20)
    seen = hashlib.sha256()
    reader = Sequential(io.BytesIO(data), seen.update)
    assert dynamic_facts(reader.read) == elf_symbols.from_bytes(data)
    assert reader.position < len(data)
    reader.drain()
    assert reader.position == len(data) and seen.hexdigest() == hashlib.sha256(data).hexdigest()


def test_a_table_in_bytes_passed_and_not_kept_is_behind(tmp_path, monkeypatch):
    """The symbol table lies before the dynamic segment: kept bytes serve it, none do not."""
    library = shared_object(tmp_path, *TARGETS["x86_64"]).read_bytes()
    monkeypatch.setattr(elf_symbols, "_CHUNK", 256)  # the tiny library in many chunks
    assert dynamic_facts(Sequential(io.BytesIO(library)).read).defined
    with pytest.raises(Behind):
        dynamic_facts(Sequential(io.BytesIO(library), keep=0).read)


@pytest.mark.parametrize("cut", [10, 64, 200])
def test_a_cut_library_is_refused_by_name(tmp_path, cut):
    library = shared_object(tmp_path, *TARGETS["x86_64"]).read_bytes()
    with pytest.raises(ElfError, match=r"ends inside|not an ELF shared object"):
        elf_symbols.from_bytes(library[:cut])


def test_an_object_file_is_no_shared_object(tmp_path):
    (tmp_path / "f.c").write_text(SOURCE)
    subprocess.run(["clang", "-target", "x86_64-linux-gnu", "-c", tmp_path / "f.c", "-o", tmp_path / "f.o"], check=True)
    head = (tmp_path / "f.o").read_bytes()
    assert not elf_symbols.is_shared_object(head[:64])
    with pytest.raises(ElfError, match="not an ELF shared object"):
        elf_symbols.from_bytes(head)
