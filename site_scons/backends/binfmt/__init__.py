"""Readers of the binary formats the steps judge: ELF dynamic tables (elf), object and archive
facts read with the LLVM tools (inspect), zip members inflated and hashed (inflate) and the
one-pass scan of an archive's members (scan). They answer what a file is and holds, never
whether that is right for a leg. May import `util` and `model`.
"""
