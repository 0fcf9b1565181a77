#!/usr/bin/env python3
"""The house rule on length: no library function over 100 lines.

Scans the library's C++ sources (meshdma/, mlir/lib/, python/csrc/) and
reports every function whose definition, from the first line of its
signature to its closing brace, spans more than LIMIT lines. Lambdas and
local classes count as part of the function that holds them.

The parser is deliberately small: comments, string and character literals
are blanked, then braces are matched, and a brace at namespace or class
scope opens a function when the text before it (since the previous `;`,
`{` or `}`) has a parameter list and is not a class, enum or initializer.

usage: check_function_length.py SOURCE_DIR [--limit N] [--list]
Exit status 1 when a function is over the limit (each printed as
file:line: name (N lines)); --list prints every function over 60 lines.
"""
import argparse
import os
import re
import sys

ROOTS = ("meshdma", "mlir/lib", "python/csrc")
LIMIT = 100
NUMBERED = 60  # Over this, a function reads as numbered steps (by review).

_TOKEN = re.compile(
    r'^[ \t]*#(?:\\\n|[^\n])*|//[^\n]*|/\*.*?\*/|R"(?P<d>[^(\s]*)\(.*?\)(?P=d)"|"(?:\\.|[^"\\\n])*"'
    r"|'(?:\\.|[^'\\\n])*'",
    re.S | re.M,
)


def blank(text):
    """Comments and literals replaced by spaces, newlines kept."""
    return _TOKEN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def scope_kind(header):
    """What a `{` opens, from the text since the previous terminator."""
    h = " ".join(header.split())
    if re.match(r"^(inline\s+)?namespace\b", h) or h.startswith('extern "C"'):
        return "namespace"
    if re.search(r"\b(class|struct|union|enum)\b[^()=]*$", h):
        return "class"
    if "(" in h and not h.rstrip().endswith("=") and not h.startswith("="):
        if re.search(r"=\s*$", h) or re.search(r"\breturn\b", h):
            return "block"
        return "function"
    return "block"


def functions(path):
    """(first line, last line, name) of every function defined in `path`."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = blank(f.read())
    stack = []  # (kind, start line, name)
    header_start, header_line = 0, 1
    found = []
    line = 1
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c in ";{}":
            inside_function = any(k == "function" for k, _, _ in stack)
            if c == "{":
                header = text[header_start:i]
                kind = "block" if inside_function else scope_kind(header)
                lead = header[: len(header) - len(header.lstrip())]
                first = header_line + lead.count("\n")
                name = ""
                if kind == "function":
                    m = re.search(r"([~\w:]+)\s*\(", " ".join(header.split()))
                    name = m.group(1) if m else "?"
                stack.append((kind, first, name))
            elif c == "}" and stack:
                kind, first, name = stack.pop()
                if kind == "function":
                    found.append((first, line, name))
            header_start, header_line = i + 1, line
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("source_dir")
    ap.add_argument("--limit", type=int, default=LIMIT)
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    over = []
    for root in ROOTS:
        for dirpath, _, files in os.walk(os.path.join(args.source_dir, root)):
            for name in sorted(files):
                if not name.endswith((".cc", ".cpp", ".h")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, args.source_dir)
                for first, last, fn in functions(path):
                    n = last - first + 1
                    shown = NUMBERED if args.list else args.limit
                    if n > shown:
                        over.append((n, rel, first, fn))
    for n, rel, first, fn in sorted(over, reverse=True):
        print(f"{rel}:{first}: {fn} ({n} lines)")
    if args.list:
        return 0
    bad = [o for o in over if o[0] > args.limit]
    if bad:
        print(f"{len(bad)} function(s) over {args.limit} lines: a library "
              "function reads as named steps (docs/architecture.md)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
