#!/usr/bin/env python3
"""check_layers.py - the layering, checked on what the compiler and the
linker see rather than on how #include lines are spelled.

  tests/check_layers.py SOURCE_ROOT BUILD_DIR

For every object built from fs/, cache/, fetch/ or common/ (the build's
compile_commands.json says which), it takes:
- the headers the compiler read for it, from the dependency list the
  compiler wrote (-MD, kept by ninja: `ninja -t deps`), so a relative include
  ("../cache/store/store.h") or a header that includes another counts as
  what it is;
- the symbols it leaves undefined (nm -u) and the object that defines each
  (nm --defined-only over the same objects), so a hand-written prototype or
  a call upward counts as the call it is.

The layers, bottom up: common; fetch/format; fetch/net; cache/store;
cache/index; cache/image; cache/echo; the data face (cache/dataset*.c);
fs. An object may read headers of, and call into, its own layer and those
below. fs/ sees the data through the face only: of the layers below it
reads cache/dataset.h and cache/dataset_opts.h and calls dataset_* (and
common/). FUSE headers are read under fs/ only, curl's under fetch/ only,
TurboJPEG's by cache/image/jpegdec.c and transform.c only; curl_easy_init
is called by fetch/net/http.c only.

Prints each offence; exits 1 if there is one, 2 if the build cannot be read
(build first: ninja -C BUILD_DIR)."""
import json
import os
import subprocess
import sys

LAYERS = [  # bottom up: (name, folder); 'cache/*': the files in cache/ itself
    ('common', 'common/'),
    ('fetch/format', 'fetch/format/'),
    ('fetch/net', 'fetch/net/'),
    ('cache/store', 'cache/store/'),
    ('cache/index', 'cache/index/'),
    ('cache/image', 'cache/image/'),
    ('cache/echo', 'cache/echo/'),
    ('the data face', 'cache/*'),  # cache/dataset*.c and .h
    ('fs', 'fs/'),
]
TREE = ('fs/', 'cache/', 'fetch/', 'common/')
FS = len(LAYERS) - 1
FACE = FS - 1
FACE_HEADERS = {'cache/dataset.h', 'cache/dataset_opts.h'}
TURBOJPEG_USERS = {'cache/image/jpegdec.c', 'cache/image/transform.c'}
# Every easy handle is made here (its TLS options, error translation and
# deadlines apply to every request).
CURL_CLIENT = 'fetch/net/http.c'


def layer(rel):
    """Rank of a project path, or None if no layer holds it."""
    for rank, (_, where) in enumerate(LAYERS):
        if where.endswith('/*'):
            d = where[:-1]
            if rel.startswith(d) and '/' not in rel[len(d):]:
                return rank
        elif rel.startswith(where):
            return rank
    return None


def unplaced(rel):
    """A file of the layered tree that no layer holds (a new folder): it
    must be given a place above before anything may use it."""
    return rel.startswith(TREE) and layer(rel) is None


def die(msg):
    print('check_layers: ' + msg, file=sys.stderr)
    sys.exit(2)


def objects(root, build):
    """[(source relative to root, object path in build)] of layered files."""
    try:
        with open(os.path.join(build, 'compile_commands.json')) as f:
            cmds = json.load(f)
    except (OSError, ValueError) as e:
        die('cannot read %s/compile_commands.json: %s' % (build, e))
    out = []
    for c in cmds:
        src = os.path.relpath(
            os.path.normpath(os.path.join(c['directory'], c['file'])), root)
        if unplaced(src):
            die('%s is in no layer: give its folder a place in LAYERS (%s)'
                % (src, __file__))
        if layer(src) is not None:
            out.append((src, c['output']))
    if not out:
        die('no fs/, cache/, fetch/ or common/ object in ' + build)
    return out


def all_deps(root, build, objs):
    """{object: files the compiler read for it}, project files relative to
    root; one `ninja -t deps` for all (it reads the whole deps log)."""
    r = subprocess.run(['ninja', '-C', build, '-t', 'deps'] +
                       [o for _, o in objs], capture_output=True, text=True)
    if r.returncode != 0:
        die('ninja -t deps: ' + r.stderr.strip())
    out, cur = {}, None
    for line in r.stdout.splitlines():
        if not line.strip():
            continue
        if not line.startswith(' '):
            obj, _, state = line.partition(': ')
            if '(VALID)' not in state:
                die('no up-to-date dependency list for %s (build first): '
                    '%s' % (obj, state))
            cur = out.setdefault(obj, [])
            continue
        full = os.path.normpath(os.path.join(build, line.strip()))
        rel = os.path.relpath(full, root)
        cur.append(full if rel.startswith('..') else rel)
    for _, o in objs:
        if not out.get(o):
            die('no dependency list for %s (build first)' % o)
    return out


def nm(build, objs, flag):
    """{object: its symbols nm lists with flag}, one nm for all."""
    paths = [os.path.join(build, o) for _, o in objs]
    r = subprocess.run(['nm', '-A', '-P', flag] + paths,
                       capture_output=True, text=True)
    if r.returncode != 0:
        die('nm: ' + r.stderr.strip())
    out = {o: [] for _, o in objs}
    for line in r.stdout.splitlines():
        path, _, rest = line.partition(': ')
        f = rest.split()
        # global symbols only (upper-case type): a static of the same name
        # elsewhere defines nothing another object can call
        if len(f) >= 2 and f[1].isupper():
            out[os.path.relpath(path, build)].append(f[0])
    return out


def check_includes(src, files):
    """Offences among the files the compiler read for src."""
    rank, bad = layer(src), []
    for f in files:
        if f.startswith('/'):
            if '/fuse3/' in f and rank != FS:
                bad.append('%s reads %s: FUSE only in fs/' % (src, f))
            if '/curl/' in f and not src.startswith('fetch/'):
                bad.append('%s reads %s: curl only in fetch/' % (src, f))
            if (f.endswith('/turbojpeg.h') or f.endswith('/jpeglib.h')) \
                    and src not in TURBOJPEG_USERS:
                bad.append('%s reads %s: TurboJPEG only in %s' %
                           (src, f, ' and '.join(sorted(TURBOJPEG_USERS))))
            continue
        hr = layer(f)
        if unplaced(f):
            bad.append('%s reads %s: in no layer (tests/check_layers.py)' %
                       (src, f))
        if hr is None:
            continue
        if hr > rank:
            bad.append('%s reads %s: %s is above %s' %
                       (src, f, LAYERS[hr][0], LAYERS[rank][0]))
        elif rank == FS and 0 < hr < FS and f not in FACE_HEADERS:
            bad.append('%s reads %s: fs/ sees the data through %s only' %
                       (src, f, ' and '.join(sorted(FACE_HEADERS))))
    return bad


def check_calls(src, undefined, where):
    rank, bad = layer(src), []
    for sym in undefined:
        if sym == 'curl_easy_init' and src != CURL_CLIENT:
            bad.append('%s calls curl_easy_init: only %s makes easy handles'
                       % (src, CURL_CLIENT))
        d = where.get(sym)
        if d is None:
            continue  # libc, FUSE, curl...: the include rules cover those
        dr = layer(d)
        if dr > rank:
            bad.append('%s uses %s (%s): %s is above %s' %
                       (src, sym, d, LAYERS[dr][0], LAYERS[rank][0]))
        elif rank == FS and 0 < dr < FS and \
                not (dr == FACE and sym.startswith('dataset_')):
            bad.append('%s uses %s (%s): fs/ calls the data face '
                       '(dataset_*) only' % (src, sym, d))
    return bad


def main():
    if len(sys.argv) != 3:
        die('usage: check_layers.py SOURCE_ROOT BUILD_DIR')
    root = os.path.realpath(sys.argv[1])
    build = os.path.realpath(sys.argv[2])
    objs = objects(root, build)
    where, defined = {}, nm(build, objs, '--defined-only')
    for src, obj in objs:
        for sym in defined[obj]:
            where.setdefault(sym, src)
    bad, read = [], all_deps(root, build, objs)
    undefined = nm(build, objs, '-u')
    for src, obj in objs:
        bad += check_includes(src, read[obj])
        bad += check_calls(src, undefined[obj], where)
    for b in sorted(set(bad)):
        print(b)
    if bad:
        print('check_layers: layering broken (see above)', file=sys.stderr)
        sys.exit(1)
    print('check_layers: %d objects: includes and calls follow the layers' %
          len(objs))


if __name__ == '__main__':
    main()
