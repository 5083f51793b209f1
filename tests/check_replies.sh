#!/bin/bash
# check_replies.sh - fails when a FUSE handler in fs/ replies an error from
# below raw: every fuse_reply_err passes a constant errno (EROFS, ENOENT...),
# 0, or errmap_reply(...), never a variable holding an internal -errno
# (fs/errmap.h is the one place where those become what a reader sees).
#   tests/check_replies.sh [SOURCE_ROOT]   (default: the tree holding this script)
# Prints every offending line as file:line: text; exits 1 if there is one.
set -uo pipefail
ROOT=${1:-$(dirname "$0")/..}
cd "$ROOT" || { echo "check_replies: no such directory $ROOT" >&2; exit 2; }
[ -d fs ] || { echo "check_replies: $ROOT has no fs/" >&2; exit 2; }

# The second argument of each call (calls fit on one line in fs/).
hits=$(grep -nE --include='*.c' -r 'fuse_reply_err[[:space:]]*\(' fs |
	while IFS= read -r line; do
		arg=$(printf '%s\n' "$line" |
			sed -E 's/.*fuse_reply_err[[:space:]]*\([^,]*,[[:space:]]*//; s/\);.*$//')
		case "$arg" in
		errmap_reply\(*) continue ;;
		esac
		# Allowed: E-constants, 0, and choices between them on names
		# (k == NS_NONE ? ENOENT : ENOTDIR); not a negated or bare
		# variable (-r, err) as the errno itself.
		if printf '%s\n' "$arg" | grep -qE '(^|[?:][[:space:]]*)-?[a-z_][a-z_0-9]*[[:space:]]*$|(^|[?:][[:space:]]*)-[a-z_]'; then
			printf '%s   <- reply through errmap_reply (fs/errmap.h)\n' "$line"
		fi
	done)
if [ -n "$hits" ]; then
	printf '%s\n' "$hits"
	echo "check_replies: raw errno in a reply (see above)" >&2
	exit 1
fi
echo "check_replies: ok"
