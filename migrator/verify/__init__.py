"""``npu-migrate verify``: prove on CPU that a migrated program trains like the original.

Layers: ``launch`` runs each side's processes with the recording probe of ``child/`` on their
path; ``compare`` pairs the recorded steps and picks the tolerance; ``render`` prints the table
and the verdict; ``command`` is the command line. docs/verify.md describes the behaviour.
"""
