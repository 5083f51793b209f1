/* xml_tag.h - the text of one tag in a small XML reply from S3, GCS or STS
 * (error bodies, credentials): the first <tag>...</tag>, no nesting, no
 * entities decoded. Low-level: it reports, it does not log. */
#ifndef ECHOFS_XML_TAG_H
#define ECHOFS_XML_TAG_H

#include "common/attrs.h"
#include <stddef.h>

/* Copies the text between the first "<tag>" of body (NUL-terminated) and
 * the next "</tag>" into out, bytes as they are. Returns 0, -ENOENT (no
 * such tag), -EINVAL (not closed) or -ENAMETOOLONG; out is "" on failure. */
MUST_CHECK
int xml_tag_copy(const char *body, const char *tag, char *out, size_t outlen);

/* The same for text meant for a message: control bytes dropped, cut to fit
 * outlen (never -ENAMETOOLONG). */
MUST_CHECK
int xml_tag_text(const char *body, const char *tag, char *out, size_t outlen);

#endif
