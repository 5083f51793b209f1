/* fuzz_gcs_json.c - libFuzzer target for gcs_json_check and gcs_json_get
 * (Google key files and token replies are untrusted input): only 0,
 * -ENOENT, -EPROTO or -ENAMETOOLONG; check and get agree on what is an
 * object; a value read fits its buffer and is NUL-terminated. */
#include "fetch/net/gcs_json.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const names[] = {"access_token", "expires_in",
					    "private_key", "a", ""};
	const char *text = (const char *)data;
	int ok = gcs_json_check(text, size);
	char out[64];

	if (ok != 0 && ok != -EPROTO)
		abort();
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		int rc = gcs_json_get(text, size, names[i], out, sizeof(out));
		if (rc != 0 && rc != -ENOENT && rc != -EPROTO &&
		    rc != -ENAMETOOLONG)
			abort();
		if ((rc == -EPROTO) != (ok == -EPROTO))
			abort(); /* get walks the same object check does */
		if (rc == 0 && memchr(out, '\0', sizeof(out)) == NULL)
			abort();
	}
	return 0;
}
