"""test_docs.py - the three places that list echofs's options agree: the
binary's --help, the README's option tables and the echofs(1) man page; the
tools' --help and their man pages name the same flags."""

import os
import re
import subprocess

import pytest

from helpers import BUILD, ECHOFS, REPO

MAN = os.path.join(REPO, "docs", "man")


def help_text(binary):
    r = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_echofs_options_agree():
    helped = set(re.findall(r"-o ([a-z_]+)", help_text(ECHOFS)))
    with open(os.path.join(REPO, "README.md")) as f:
        readme = set(re.findall(r"^\| `-o ([a-z_]+)", f.read(), re.M))
    with open(os.path.join(MAN, "echofs.1")) as f:
        man = set(re.findall(r'^\.BI? "?\\-o ([a-z_]+)', f.read(), re.M))
    assert helped, "no -o option found in --help"
    assert helped == readme, "--help vs README: only in help %s, only in README %s" % (
        sorted(helped - readme), sorted(readme - helped))
    assert helped == man, "--help vs echofs.1: only in help %s, only in man %s" % (
        sorted(helped - man), sorted(man - helped))


@pytest.mark.parametrize("tool", ["echofs-index", "echofs-pack", "echofs-top"])
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
