#!/bin/bash
# check_replies.sh - fails when a FUSE handler in fs/ replies an error from
# below raw: every fuse_reply_err passes a constant errno (EROFS, ENOENT...),
# 0, or errmap_reply(...), never a variable holding an internal -errno
# (fs/errmap.h is the one place where those become what a reader sees).
#   tests/check_replies.sh [SOURCE_ROOT]   (default: the tree holding this script)
#   tests/check_replies.sh --selftest      (only the selftest)
# Prints every offending call as file:line: text (a call wrapped over
# several lines is joined into one); exits 1 if there is one. Every run
# first checks itself on a scratch fixture of good and bad calls, one and
# two lines long, so that a check gone blind fails instead of passing.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)

# Each call as "file:line: call text", a call wrapped over lines joined
# with single spaces, up to the ')' that closes it.
calls() {
	grep -rlE --include='*.c' 'fuse_reply_err[[:space:]]*\(' fs |
		sort | xargs -r awk '
		FNR == 1 { open_call = 0 }
		open_call {
			sub(/^[[:space:]]+/, "")
			text = text " " $0
			depth += gsub(/\(/, "(") - gsub(/\)/, ")")
			if (depth <= 0) { print where text; open_call = 0 }
			next
		}
		/fuse_reply_err[[:space:]]*\(/ {
			text = substr($0, match($0, /fuse_reply_err[[:space:]]*\(/))
			where = FILENAME ":" FNR ": "
			depth = gsub(/\(/, "(", text) - gsub(/\)/, ")", text)
			if (depth <= 0) print where text
			else open_call = 1
		}'
}

# The offending calls of the tree in the current directory.
offences() {
	calls | while IFS= read -r line; do
		arg=$(printf '%s\n' "$line" |
			sed -E 's#/\*[^*]*\*/# #g; s/.*fuse_reply_err[[:space:]]*\([^,]*,[[:space:]]*//; s/\);.*$//; s/[[:space:]]+$//')
		case "$arg" in
		errmap_reply\(*) continue ;;
		esac
		# Allowed: E-constants, 0, and choices between them on names
		# (k == NS_NONE ? ENOENT : ENOTDIR); not a negated or bare
		# variable (-r, err) as the errno itself.
		if printf '%s\n' "$arg" | grep -qE '(^|[?:][[:space:]]*)-?[a-z_][a-z_0-9]*[[:space:]]*$|(^|[?:][[:space:]]*)-[a-z_]'; then
			printf '%s   <- reply through errmap_reply (fs/errmap.h)\n' "$line"
		fi
	done
}

# A fixture with one bad call per shape (found) and good ones (not found).
selftest() {
	local tmp got want
	tmp=$(mktemp -d /tmp/echofs-replies-selftest.XXXXXX) || return 2
	mkdir -p "$tmp/fs"
	cat >"$tmp/fs/fixture.c" <<'EOF'
static void good(fuse_req_t req, int r, int k)
{
	fuse_reply_err(req, EROFS);
	fuse_reply_err(req, 0);
	fuse_reply_err(req, errmap_reply(ERRMAP_READ, r));
	fuse_reply_err(req,
		       errmap_reply(ERRMAP_LOOKUP, r));
	fuse_reply_err(req,
		       ENOSYS); /* a comment (with parentheses) */
	fuse_reply_err(req, k == NS_NONE ? ENOENT : ENOTDIR);
}

static void bad(fuse_req_t req, int r, int err)
{
	fuse_reply_err(req, -r);   /* BAD1 */
	fuse_reply_err(req, err);  /* BAD2 */
	fuse_reply_err(req,        /* BAD3 */
		       -r);
	fuse_reply_err(
		req, err);         /* BAD4 */
	fuse_reply_err(req, r ? EIO :
				-r); /* BAD5 */
}
EOF
	got=$(cd "$tmp" && offences | grep -oE 'BAD[0-9]' | sort | tr '\n' ' ')
	rm -rf "$tmp"
	want="BAD1 BAD2 BAD3 BAD4 BAD5 "
	if [ "$got" != "$want" ]; then
		echo "check_replies: selftest: found [$got], want [$want]" >&2
		return 1
	fi
}

if [ "${1:-}" = "--selftest" ]; then
	selftest && echo "check_replies: selftest ok"
	exit $?
fi
selftest || exit 1
ROOT=${1:-$HERE/..}
cd "$ROOT" || { echo "check_replies: no such directory $ROOT" >&2; exit 2; }
[ -d fs ] || { echo "check_replies: $ROOT has no fs/" >&2; exit 2; }

hits=$(offences)
if [ -n "$hits" ]; then
	printf '%s\n' "$hits"
	echo "check_replies: raw errno in a reply (see above)" >&2
	exit 1
fi
echo "check_replies: ok"
