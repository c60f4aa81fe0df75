"""Run one harness under atheris (libFuzzer): ``python -m fuzz.run TARGET [libFuzzer args]``.

``--list`` prints the targets. ``--seed DIR`` writes the target's seed inputs (valid frames
from the project's encoders) into DIR first; pass DIR as a corpus directory too so libFuzzer
starts from them. Everything after the target name goes to libFuzzer (``-runs=N``,
``-max_total_time=S``, ``-artifact_prefix=DIR/``, corpus directories...).
"""

from __future__ import annotations

import hashlib
import sys
import types
from pathlib import Path

import atheris  # type: ignore[import-untyped]
from atheris.instrument_bytecode import patch_code  # type: ignore[import-untyped]

# atheris 2.3.0 miscompiles some CPython 3.11 functions (the instrumented code segfaults, see
# google/atheris#57 for the family of bugs): these are left uninstrumented, the rest of their
# module is instrumented function by function. A crash found by a harness is replayed without
# atheris by tests/fuzz/test_fuzz.py before it counts.
_NOT_INSTRUMENTED = {
    "habroker.fastjson": {"_object"},
    # its rfind loop segfaulted under atheris, called by the pure-Python parse_record alone
    "habroker.message": {"find_property"},
}

# Instrument habroker's modules for coverage: they must be first imported inside this block.
with atheris.instrument_imports(include=["habroker"], exclude=list(_NOT_INSTRUMENTED)):
    from fuzz.targets import TARGETS


def _instrument_partly() -> None:
    for module_name, skip in _NOT_INSTRUMENTED.items():
        module = sys.modules[module_name]
        for name, func in vars(module).items():
            if (
                isinstance(func, types.FunctionType)
                and func.__module__ == module_name
                and name not in skip
            ):
                func.__code__ = patch_code(func.__code__, True)


_instrument_partly()


def main(argv: list[str]) -> int:
    args = argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 2
    if args[0] == "--list":
        for listed in TARGETS.values():
            print(f"{listed.name}\t{listed.doc}")
        return 0
    name, rest = args[0], args[1:]
    target = TARGETS.get(name)
    if target is None:
        print(f"unknown target {name!r}; one of {', '.join(TARGETS)}", file=sys.stderr)
        return 2
    if len(rest) >= 2 and rest[0] == "--seed":
        seed_dir = Path(rest[1])
        seed_dir.mkdir(parents=True, exist_ok=True)
        for data in target.seeds():
            (seed_dir / f"seed-{hashlib.sha1(data).hexdigest()}").write_bytes(data)
        rest = rest[2:]
    atheris.Setup([argv[0], *rest], target.harness)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
