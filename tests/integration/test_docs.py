"""test_docs.py - the places that list echofs's options agree: the binary's
--help, the echofs(1) man page (the reference: every option once) and the
user guide under docs/guide/ (every option once, in the option table of its
topic's page); the README's and the guide's examples use only real options;
the tools' --help and their man pages name the same flags; links between
the documents resolve."""

import collections
import glob
import os
import re
import subprocess

import pytest

from helpers import BUILD, ECHOFS, ERROR_KEYS, REPO

MAN = os.path.join(REPO, "docs", "man")
GUIDE = os.path.join(REPO, "docs", "guide")

# An option as the three places spell it: "-o name" (the value, if any,
# follows a "="), or a flag ("-f", "--check").
OPTION = re.compile(r"(?<![\w-])(-o [a-z_]+|--?[A-Za-z][a-z-]*)")


def help_text(binary):
    r = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    return r.stdout


def help_options():
    """Options of `echofs --help`: the tags of its option lines (indented
    lines that start with '-'), in order, repeats kept."""
    names = []
    for line in help_text(ECHOFS).splitlines():
        m = re.match(r"^ {2,}(-o [a-z_]+|-[\w-]+(?:, -[\w-]+)?)", line)
        if m:
            names += OPTION.findall(m.group(1).split("=")[0])
    return names


def man_options():
    """Options of echofs(1): the tag line after each .TP, repeats kept."""
    with open(os.path.join(MAN, "echofs.1")) as f:
        lines = f.read().replace("\\-", "-").splitlines()
    names = []
    for i, line in enumerate(lines[:-1]):
        if line == ".TP" and lines[i + 1].startswith(".B"):
            tag = lines[i + 1].replace('"', "").split("=")[0]
            names += OPTION.findall(tag)
    return names


def guide_options():
    """Options of the user guide: the first cell of its table rows when
    that cell is code (`-o cache_dir=DIR`, `-h`, `--help`), repeats kept,
    with the page each came from."""
    found = []
    for page in sorted(glob.glob(os.path.join(GUIDE, "*.md"))):
        with open(page) as f:
            for line in f:
                m = re.match(r"^\| ((?:`[^`]+`(?:, )?)+) \|", line)
                if m:
                    for code in re.findall(r"`([^`]+)`", m.group(1)):
                        found += [(n, os.path.basename(page))
                                  for n in OPTION.findall(code.split("=")[0])]
    return found


def only(a, b):
    return sorted(set(a) - set(b))


def test_echofs_options_agree():
    """Every option of --help is in the man page and in the guide, and the
    other way round (a new option must be documented in both)."""
    helped = help_options()
    man = man_options()
    guide = [n for n, _ in guide_options()]
    assert "-o cache_dir" in helped and "--check" in helped, helped
    assert set(helped) == set(man), \
        "--help vs echofs.1: only in --help %s, only in the man page %s" % (
            only(helped, man), only(man, helped))
    assert set(helped) == set(guide), \
        "--help vs docs/guide: only in --help %s, only in the guide %s" % (
            only(helped, guide), only(guide, helped))


def test_cache_dir_rules_agree():
    """--help, the man page and the guide give the same cache_dir default
    without HOME and the same rule on who may own it, since the mount
    refuses a directory that breaks it."""
    with open(os.path.join(MAN, "echofs.1")) as f:
        man = f.read().replace("\\-", "-")
    with open(os.path.join(GUIDE, "caching.md")) as f:
        guide = f.read()
    places = {"--help": help_text(ECHOFS), "echofs.1": man, "caching.md": guide}
    for name, text in places.items():
        text = " ".join(text.split())
        for words in ("/tmp/echofs-cache-UID", "writable by group or others",
                      "sticky", "prepared"):
            assert words in text, "%s does not say %r" % (name, words)


def test_error_kinds_agree():
    """The stats' error kinds (fs/control.c's errors()), the guide's list
    of them and the tests' ERROR_KEYS name the same kinds: a new counter
    must be documented where users look for it."""
    with open(os.path.join(REPO, "fs", "control.c")) as f:
        src = f.read()
    body = src[src.index("static size_t errors("):]
    kinds = set(re.findall(r'\bE\("(\w+)"', body[:body.index("#undef E")]))
    assert len(kinds) > 10, kinds
    with open(os.path.join(GUIDE, "operating.md")) as f:
        guide = " ".join(f.read().split())
    start = "`errors` by kind ("
    listed = guide[guide.index(start) + len(start):]
    listed = set(re.findall(r"`(\w+)`", listed[:listed.index("echo mounts add")]))
    assert listed == kinds, "operating.md: missing %s, extra %s" % (
        only(kinds, listed), only(listed, kinds))
    assert set(ERROR_KEYS) == kinds, "ERROR_KEYS: missing %s, extra %s" % (
        only(kinds, ERROR_KEYS), only(ERROR_KEYS, kinds))


def test_every_option_listed_once():
    """The man page is the one reference: each option has one entry there
    and one row in the guide (on the page of its topic)."""
    twice = [n for n, c in collections.Counter(man_options()).items() if c > 1]
    assert not twice, "listed more than once in echofs.1: %s" % twice
    pages = collections.defaultdict(list)
    for n, page in guide_options():
        pages[n].append(page)
    twice = {n: p for n, p in pages.items() if len(p) > 1}
    assert not twice, "listed more than once in docs/guide: %s" % twice


def example_options(path):
    """The option names of every `-o a=...,b` in the file's code (fenced
    blocks and inline code)."""
    with open(path) as f:
        text = f.read()
    code = re.findall(r"```.*?```", text, re.S) + re.findall(r"`[^`\n]+`", text)
    names = []
    for block in code:
        for arg in re.findall(r"(?<![\w-])-o\s+([^\s`'\"]+)", block):
            for part in arg.split(","):
                name = part.split("=")[0]
                if re.fullmatch(r"[a-z_]+", name):
                    names.append(name)
    return names


def test_examples_use_real_options():
    """The README's and the guide's examples name only options echofs has
    (the README's examples are what newcomers copy)."""
    helped = {n[3:] for n in help_options() if n.startswith("-o ")}
    # libfuse's own options, passed through, and mount(8)'s
    helped |= {"allow_other", "ro", "rw", "nosuid", "nodev",
               "default_permissions"}
    docs = [os.path.join(REPO, "README.md")] + sorted(
        glob.glob(os.path.join(GUIDE, "*.md")))
    seen = 0
    for path in docs:
        names = example_options(path)
        seen += len(names)
        bad = sorted(set(names) - helped)
        assert not bad, "%s uses options echofs does not have: %s" % (
            os.path.relpath(path, REPO), bad)
    assert seen > 20, "found only %d example options: is the parser right?" % seen


def anchors(path):
    """GitHub's anchors for the headings of a markdown file."""
    out = set()
    fence = False
    with open(path) as f:
        for line in f:
            if line.startswith("```"):
                fence = not fence
            m = None if fence else re.match(r"^#+ (.*)", line)
            if m:
                h = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
                out.add(h.replace(" ", "-"))
    return out


def test_doc_links_resolve():
    """Every relative link of the README, HACKING.md, BENCHMARKS.md and
    docs/ (images included) names a file that exists, and a #fragment into
    a markdown file names one of its headings."""
    files = [os.path.join(REPO, n) for n in ("README.md", "HACKING.md",
                                             "BENCHMARKS.md")]
    files += sorted(glob.glob(os.path.join(REPO, "docs", "**", "*.md"),
                              recursive=True))
    bad = []
    links = 0
    for path in files:
        with open(path) as f:
            text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            links += 1
            name, _, frag = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), name)) \
                if name else path
            if not os.path.exists(dest):
                bad.append("%s: %s (no such file)" % (os.path.relpath(path, REPO), target))
            elif frag and dest.endswith(".md") and frag not in anchors(dest):
                bad.append("%s: %s (no such heading)" % (os.path.relpath(path, REPO), target))
    assert links > 50, links
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("tool", ["echofs-index", "echofs-pack", "echofs-top", "echofs-fdpass"])
def test_tool_flags_agree(tool):
    helped = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", help_text(
        os.path.join(BUILD, "tools", tool))))
    with open(os.path.join(MAN, tool + ".1")) as f:
        page = f.read().replace("\\-", "-")
    man = set(re.findall(r"^\.B[IR]? (--[a-z][a-z-]*)", page, re.M))
    man |= set(re.findall(r'^\.BR -\w ", " (--[a-z][a-z-]*)', page, re.M))
    assert helped, "no long flag in %s --help" % tool
    assert helped == man, "%s: only in --help %s, only in man %s" % (
        tool, sorted(helped - man), sorted(man - helped))


def test_version_names_the_libraries():
    r = subprocess.run([ECHOFS, "--version"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0
    out = r.stdout
    assert out.startswith("echofs ")
    for lib in ("libfuse ", "libmicrohttpd ", "libjpeg-turbo ", "libspng ",
                "libwebp ", "libcurl/"):
        assert lib in out, "%r missing from --version: %s" % (lib, out)
    # libcurl's line names its TLS backend.
    assert re.search(r"(OpenSSL|GnuTLS|wolfSSL|mbedTLS)/", out), out
