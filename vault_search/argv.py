"""Reading a command line before click does, with ``os`` and nothing else
(the fast path, ``fast.py``, imports no click): the global options and an
option's value."""

from __future__ import annotations

GLOBAL_OPTIONS = ("--vault", "--index-dir", "--color")


def hoist_globals(argv: list[str], owned) -> list[str]:
    """``argv`` with the global options (``GLOBAL_OPTIONS``) that were written
    after the command moved before it, so ``search "due date" --vault X``
    means ``--vault X search "due date"``. ``owned(command)``: the global
    flags the command has itself (``serve --vault``), left where they are.
    Nothing after ``--`` moves; ValueError for such an option without its
    value; a command line this cannot read before the command is returned as
    it is, for click to name what is wrong."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        name, value, i = option_at(argv, i, GLOBAL_OPTIONS)
        if name is None or not value:
            return argv          # --help, --version, a missing value: click says
    if i >= len(argv):
        return argv
    keep = set(owned(argv[i]))
    moved: list[str] = []
    rest: list[str] = []
    j = i + 1
    while j < len(argv):
        arg = argv[j]
        if arg == "--":
            rest += argv[j:]
            break
        flag = arg.split("=", 1)[0] if arg.startswith("--") else arg
        if flag in GLOBAL_OPTIONS and flag not in keep:
            name, value, after = option_at(argv, j, GLOBAL_OPTIONS)
            if name is not None and value:
                moved += argv[j:after]
                j = after
                continue
            raise ValueError(f"Option '{flag}' requires an argument.")
        rest.append(arg)
        j += 1
    return argv[:i] + moved + [argv[i]] + rest


def option_at(argv: list[str], i: int, known) -> tuple[str | None, str, int]:
    """(option name, its value or "", index after it) of ``argv[i]``; name None
    when it is not one of ``known`` or its value is missing."""
    arg = argv[i]
    if arg.startswith("--") and "=" in arg:
        name, value = arg.split("=", 1)
        return (name, value, i + 1) if name in known and takes(known, name) else (None, "", i + 1)
    if arg in known:
        if not takes(known, arg):
            return arg, "", i + 1
        if i + 1 >= len(argv):
            return None, "", i + 1
        return arg, argv[i + 1], i + 2
    if len(arg) > 2 and arg[1] != "-" and arg[:2] in known and takes(known, arg[:2]):   # -n5
        return arg[:2], arg[2:], i + 1
    return None, "", i + 1


def takes(known, name: str) -> bool:
    return bool(known[name][1]) if isinstance(known, dict) else True
