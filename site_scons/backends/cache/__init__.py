"""Reuse across trees and machines: leg keys (key), who may write an entry and whom a reader
trusts (trust, key_files, redaction), whether an entry may become a leg's archive (entry), and
the stores that hold entries (stores: a directory, HTTP, GitHub release assets). May import
every floor up to `steps`.
"""
