#!/usr/bin/env python3
"""docs_transcripts.py — the transcripts and --help texts in docs/ are the tools' real output.

    docs_transcripts.py check  TOOLS_DIR DOC...   exit 0 when every marked block agrees, 1 if not
    docs_transcripts.py update TOOLS_DIR DOC...   rewrite the marked blocks from real runs

TOOLS_DIR holds ringdump, ringpub, ringsub (and ringbridge/ringbridge when it was built).

Two kinds of marked block, each a fenced block right after an HTML comment (invisible when the
Markdown is rendered):

  <!-- transcript NAMES: SETUP | SETUP ... -->
      A transcript: lines `$ TOOL ARGS` and the output that follows each, `[exit N]` after it.
      NAMES (comma-separated) are the channel names the block uses; each run gets its own
      (t-doc-PID-NAME, mapped back in the output), so /dev/shm shared with others is no problem.
      Each SETUP is a tool command started in the background before the block's commands run
      (ringpub first: the channel is waited for); `dead SETUP` is killed with SIGKILL after the
      others settled (a dead reader), `stopped SETUP` stopped with SIGSTOP just before (a hung
      producer, which therefore does not reap the dead reader). All are ended after the block.
      `check` compares each line's words (numbers, times, units, pids, slot states dropped:
      they change from run to run), but keeps `layout N` exact, and the number of lines, and
      each command's exit status.

  <!-- help TOOL [SUBCOMMAND] -->
      The exact `TOOL [SUBCOMMAND] --help` text. `check` compares it character for character.
"""
import os
import re
import shlex
import signal
import subprocess
import sys
import time

MARK = re.compile(r"^<!-- (transcript|help) (.*?) ?-->$")
UNITS = {"ns", "us", "ms", "s", "B", "KiB", "MiB", "GiB", "KB", "MB", "GB", "Hz", "ago"}
SLOT_STATES = {"ready", "held", "writing", "empty", "free"}


def tool_path(tools_dir, tool):
    nested = os.path.join(tools_dir, tool, tool)  # ringbridge/ringbridge
    return nested if os.path.isfile(nested) else os.path.join(tools_dir, tool)


class Names:
    def __init__(self, names):
        self.names = [n for n in names if n]
        self.prefix = "t-doc-%d-" % os.getpid()

    def to_run(self, text):
        for n in self.names:
            text = re.sub(r"(?<![\w-])%s(?![\w-])" % re.escape(n), self.prefix + n, text)
        return text

    def to_doc(self, text):
        return text.replace(self.prefix, "")


def run_command(tools_dir, names, command, timeout=60):
    argv = shlex.split(names.to_run(command))
    argv0 = argv[0]
    argv[0] = tool_path(tools_dir, argv0)
    p = subprocess.run(argv, executable=argv[0], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout, env=dict(os.environ, NO_COLOR="1"))
    # Usage lines name the program as it was started: as the docs do, by its name.
    out = p.stdout.decode(errors="replace").replace(argv[0], argv0)
    return names.to_doc(out), p.returncode


def start_setup(tools_dir, names, setups):
    procs = []
    dead = []
    stopped = []
    for s in setups:
        s = s.strip()
        kill = s.startswith("dead ")
        if kill:
            s = s[len("dead "):]
        stop = s.startswith("stopped ")
        if stop:
            s = s[len("stopped "):]
        argv = shlex.split(names.to_run(s))
        argv[0] = tool_path(tools_dir, argv[0])
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(p)
        time.sleep(0.3)  # one after the other: reader indices in the order given
        if kill:
            dead.append(p)
        if stop:
            stopped.append(p)
        if os.path.basename(argv[0]) == "ringpub":
            for _ in range(500):
                if all(os.path.exists("/dev/shm/ipcring." + names.prefix + n) for n in names.names):
                    break
                time.sleep(0.01)
    time.sleep(1.5)  # readers attach and read; rates have a history
    for p in stopped:
        p.send_signal(signal.SIGSTOP)
    time.sleep(0.2 if stopped else 0)
    for p in dead:
        p.send_signal(signal.SIGKILL)
        p.wait()
    time.sleep(0.3)
    return procs


def stop_setup(tools_dir, names, procs):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    for n in names.names:
        subprocess.run([tool_path(tools_dir, "ringdump"), "rm", "--force", names.prefix + n],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def parse_transcript(lines):
    """[(command, [output lines], exit status or None)]"""
    steps = []
    for line in lines:
        if line.startswith("$ "):
            steps.append([line[2:], [], None])
        elif steps:
            m = re.fullmatch(r"\[exit (\d+)\]", line)
            if m:
                steps[-1][2] = int(m.group(1))
            else:
                steps[-1][1].append(line)
    return steps


def words(line):
    kept = []
    for m in re.finditer(r"layout(?: version)? \d+|[A-Za-z_][A-Za-z0-9_]*", line):
        w = m.group(0)
        if w in UNITS:
            continue
        kept.append("STATE" if w in SLOT_STATES else w)
    return kept


def run_transcript(tools_dir, spec, lines):
    head, _, setup = spec.partition(":")
    names = Names([n.strip() for n in head.split(",")])
    steps = parse_transcript(lines)
    procs = start_setup(tools_dir, names, [s for s in setup.split("|") if s.strip()])
    try:
        return steps, [run_command(tools_dir, names, cmd) for cmd, _, _ in steps]
    finally:
        stop_setup(tools_dir, names, procs)


def transcript_block(steps, results):
    out = []
    for (cmd, _, _), (text, rc) in zip(steps, results):
        out.append("$ " + cmd)
        out.extend(text.rstrip("\n").split("\n") if text.strip() else [])
        out.append("[exit %d]" % rc)
    return out


def compare_transcript(where, steps, results):
    problems = []
    for (cmd, expected, exit_status), (text, rc) in zip(steps, results):
        got = text.rstrip("\n").split("\n") if text.strip() else []
        if exit_status is not None and exit_status != rc:
            problems.append("%s: `%s` exits %d, the docs say %d" % (where, cmd, rc, exit_status))
        if len(got) != len(expected):
            problems.append("%s: `%s` prints %d line(s), the docs show %d:\n%s" %
                            (where, cmd, len(got), len(expected), text))
            continue
        for e, g in zip(expected, got):
            if words(e) != words(g):
                problems.append("%s: `%s`:\n  docs: %s\n  real: %s" % (where, cmd, e, g))
    return problems


def process(mode, tools_dir, doc):
    with open(doc) as f:
        lines = f.read().split("\n")
    problems = []
    out = []
    i = 0
    while i < len(lines):
        m = MARK.match(lines[i])
        out.append(lines[i])
        i += 1
        if not m:
            continue
        if i >= len(lines) or not lines[i].startswith("```"):
            problems.append("%s:%d: a marker not followed by a fenced block" % (doc, i))
            continue
        out.append(lines[i])
        start = i + 1
        end = start
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        block = lines[start:end]
        where = "%s:%d" % (doc, start)
        kind, spec = m.group(1), m.group(2)
        if kind == "help":
            parts = spec.split()
            if not os.path.isfile(tool_path(tools_dir, parts[0])):
                print("%s: %s not built: not checked" % (where, parts[0]))
                out.extend(block)
            else:
                text, rc = run_command(tools_dir, Names([]), " ".join(parts + ["--help"]))
                real = text.rstrip("\n").split("\n")
                if rc != 0:
                    problems.append("%s: `%s --help` exits %d" % (where, spec, rc))
                if mode == "check" and real != block:
                    problems.append("%s: `%s --help` differs from the docs; run "
                                    "tests/tools/docs_transcripts.py update" % (where, spec))
                out.extend(real if mode == "update" else block)
        else:
            steps, results = run_transcript(tools_dir, spec, block)
            if mode == "check":
                problems.extend(compare_transcript(where, steps, results))
                out.extend(block)
            else:
                out.extend(transcript_block(steps, results))
        i = end
    if mode == "update":
        with open(doc, "w") as f:
            f.write("\n".join(out))
    return problems


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("check", "update"):
        print(__doc__)
        return 2
    problems = []
    for doc in sys.argv[3:]:
        problems.extend(process(sys.argv[1], sys.argv[2], doc))
    for p in problems:
        print(p)
    print("%d problem(s)" % len(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
