"""binfmt/elf.py on real libraries from the registries' wheels, against llvm-nm and
llvm-readobj (binfmt/inspect.py): PyTorch's libtorch_cpu.so (434 MB, 74 k exported symbols; slow,
a 192 MB wheel) and libc10.so, ONNX Runtime's libonnxruntime.so for x86_64 and aarch64.
Read as verify reads them: streamed out of the wheel's zip member, only as far as the
tables lie (the dynamic segment of libtorch_cpu.so lies at 344 MB of its 434 MB)."""
from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

import inputs
from backends.binfmt.elf import Sequential, dynamic_facts
from backends.binfmt.inflate import open_member
from backends.binfmt.inspect import (
    elf_version_definitions, exported_symbols, library_identity, needed_libraries, symbol_sets,
)

pytestmark = [pytest.mark.e2e]


def ort_wheel(cache: Path, platform: str) -> Path:
    version = inputs.ORT_VERSION
    return inputs.platform_wheel(f"onnxruntime=={version}", platform, f"onnxruntime-{version}-*{platform[-7:]}.whl",
                                 cache)


def same_as_the_tools(wheel: Path, member: str, work: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        info = archive.getinfo(member)
        with open_member(archive, info) as stream:
            reader = Sequential(stream)
            facts = dynamic_facts(reader.read)
        library = work / Path(member).name
        library.write_bytes(archive.read(info))
    if info.file_size > 64 << 20:  # a small library's dynamic segment lies in its last chunk
        assert reader.position < info.file_size, "the whole member was inflated"
    assert facts.defined == exported_symbols(library)
    assert symbol_sets(library) == (set(facts.defined), set())  # what verify read before: llvm-nm --dynamic
    assert list(facts.needed) == needed_libraries(library)
    assert facts.soname == library_identity(library)
    assert list(facts.version_definitions) == elf_version_definitions(library)


@pytest.mark.parametrize("platform", [inputs.LINUX_X64_PLATFORM, inputs.LINUX_AARCH64_PLATFORM])
def test_onnxruntime(e2e_cache, tmp_path, platform):
    wheel = ort_wheel(e2e_cache, platform)
    same_as_the_tools(wheel, f"onnxruntime/capi/libonnxruntime.so.{inputs.ORT_VERSION}", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("member", ["torch/lib/libtorch_cpu.so", "torch/lib/libc10.so"])
def test_libtorch(e2e_cache, tmp_path, member):
    same_as_the_tools(inputs.torch_cpu_wheel(e2e_cache), member, tmp_path)
