#!/usr/bin/python3
"""Checks that rrpc's binaries speak for themselves: `BINARY --help` exits 0 and prints a usage
line first, then the binary's own flags before any rrpc flag it honours, and none of the flags of
the libraries (gflags' --flagfile, glog's --logtostderr), while `BINARY --helpfull` still lists
those (util/command_line.h).

  binary-help-test.py --check BINARY OWN_FLAG[,RRPC_FLAG...] LIBRARY_FLAG[,...] [--check ...]

OWN_FLAG is a flag defined in the binary's own files; each RRPC_FLAG one of the rrpc flags it
honours, which --help must list after OWN_FLAG; each LIBRARY_FLAG a flag of a library linked into
the binary (flagfile: gflags; logtostderr: glog), which --helpfull must list and --help must not.
Every run is bounded by a timeout.
"""

import argparse
import os
import subprocess
import sys

def run(binary, arg):
    proc = subprocess.run([binary, arg], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=60, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def check(binary, flags, library_flags):
    name = os.path.basename(binary)
    own, rrpc_flags = flags[0], flags[1:]
    errors = []
    code, out, err = run(binary, "--help")
    if code != 0:
        errors.append(f"--help exited {code}; stderr: {err.strip()}")
    first = out.splitlines()[0] if out else ""
    if not first.startswith(f"Usage: {name}"):
        errors.append(f"--help's first line is {first!r}, not 'Usage: {name} ...'")
    # A listed flag starts its line ("  --name=default (type)"); the usage line may name it too.
    own_at = out.find(f"\n  --{own}=")
    if own_at < 0:
        errors.append(f"--help does not list its own flag --{own}")
    for flag in rrpc_flags:
        at = out.find(f"\n  --{flag}=")
        if at < 0:
            errors.append(f"--help does not list the rrpc flag --{flag}")
        elif own_at >= 0 and at < own_at:
            errors.append(f"--help lists --{flag} before the binary's own --{own}")
    _, full, _ = run(binary, "--helpfull")
    for flag in [own] + rrpc_flags + library_flags:
        if f"-{flag} (" not in full:
            errors.append(f"--helpfull does not list --{flag}")
    for flag in library_flags:
        if flag in out:
            errors.append(f"--help lists the library flag --{flag}")

    for e in errors:
        print(f"FAIL {name}: {e}")
    if errors:
        print(f"--- {name} --help:\n{out}")
    else:
        print(f"ok   {name}: usage line, {1 + len(rrpc_flags)} flag(s) in order, "
              f"library flags only under --helpfull")
    return not errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", nargs=3, action="append", required=True,
                        metavar=("BINARY", "FLAGS", "LIBRARY_FLAGS"))
    args = parser.parse_args()
    ok = True
    for binary, flags, library_flags in args.check:
        ok = check(binary, flags.split(","), library_flags.split(",")) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
