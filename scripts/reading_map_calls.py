#!/usr/bin/python3
"""The calls of the reading map's pieces to functions defined off the map.

Reads the pieces as lines `FILE FIRST LAST` (1-based, inclusive) on stdin; the arguments are the
names the map trusts. Prints one line per function a piece calls that is defined in the core's
floors (runtime tensor autograd nn optim) but in none of the pieces, and is not trusted; and one
per trusted name that the core does not define or no piece calls (the list stays minimal). Used by
scripts/check_reading_map, which explains the rules.

A call is a name followed by `(` (template arguments allowed) in a piece's code, comments and
string literals removed, that is not the declaration or definition made on that line. Matching
is by name: the sources are not compiled, so an overloaded name counts as read when any of its
definitions is on the map, and a name the core never defines (std::, BLAS) is not the core's.
"""
import json
import re
import subprocess
import sys

KEYWORDS = set("if for while switch return sizeof catch static_cast dynamic_cast reinterpret_cast "
               "const_cast decltype alignof alignas noexcept static_assert requires throw new delete "
               "operator".split())


def core_sources():
    listed = subprocess.run(["git", "ls-files", "runtime", "tensor", "autograd", "nn", "optim"],
                            capture_output=True, text=True, check=True).stdout.split()
    # The components in the floors' folders (ONNX export, Hugging Face files) are not the core.
    return [f for f in listed if re.search(r"\.(h|cpp)$", f) and not re.match(r"nn/(onnx|hf)/", f)]


def tags(files):
    """Every function definition by name, and every (file, line, name) declared or defined."""
    out = subprocess.run(["ctags", "--output-format=json", "--fields=+neK", "--kinds-C++=fp",
                          "--language-force=C++", "-f", "-"] + files,
                         capture_output=True, text=True, check=True).stdout
    definitions, declared_at = {}, set()
    for line in out.splitlines():
        tag = json.loads(line)
        if tag.get("_type") != "tag":
            continue
        declared_at.add((tag["path"], tag["line"], tag["name"]))
        if tag["kind"] == "function":
            definitions.setdefault(tag["name"], []).append((tag["path"], tag["line"]))
    return definitions, declared_at


def calls_in(path, first, last, declared_at):
    """The names a piece calls, each with the first line that calls it."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    lines = text.splitlines()
    calls = {}
    for number in range(first, last + 1):
        code = re.sub(r"//.*", "", lines[number - 1])
        code = re.sub(r'"(\\.|[^"\\])*"', '""', code)
        code = re.sub(r"'(\\.|[^'\\])'", "''", code)
        for m in re.finditer(r"\b([A-Za-z_]\w*)\s*(?:<[^<>;()]*>)?\s*\(", code):
            name = m.group(1)
            if name in KEYWORDS or name.isupper() or (path, number, name) in declared_at:
                continue  # a keyword, a macro, or what this line declares
            calls.setdefault(name, number)
    return calls


def main():
    pieces = [(f, int(a), int(b)) for f, a, b in (l.split() for l in sys.stdin if l.strip())]
    trusted = set(sys.argv[1:])
    definitions, declared_at = tags(core_sources())

    def on_map(path, line):
        return any(path == f and a <= line <= b for f, a, b in pieces)

    called = set()
    for path, first, last in pieces:
        calls = calls_in(path, first, last, declared_at)
        called |= set(calls)
        for name, line in sorted(calls.items()):
            where = definitions.get(name)
            if not where or name in trusted or any(on_map(p, l) for p, l in where):
                continue
            shown = ", ".join(f"{p}:{l}" for p, l in where[:3]) + (", ..." if len(where) > 3 else "")
            print(f"{path}:{line} calls {name}, defined off the map ({shown}): "
                  "add its piece or trust it")
    for name in sorted(trusted - set(definitions)):
        print(f"the trust list names {name}, which the core does not define")
    for name in sorted((trusted & set(definitions)) - called):
        print(f"the trust list names {name}, which no piece calls")


if __name__ == "__main__":
    main()
