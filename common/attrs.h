/* Function attributes the project's headers share. */
#ifndef ECHOFS_COMMON_ATTRS_H
#define ECHOFS_COMMON_ATTRS_H

/* On a function returning 0 / -errno (or a size, a descriptor, or -errno):
 * the compiler warns (an error here: -Werror) at a call that drops the
 * result, so no failure goes unnoticed. */
#define MUST_CHECK __attribute__((warn_unused_result))

/* The one way to drop a MUST_CHECK result on purpose, with a comment at the
 * call saying why (gcc ignores a plain (void) cast for this attribute). */
#define IGNORE_RESULT(expr)                                                    \
	do {                                                                   \
		if (expr) {                                                    \
		}                                                              \
	} while (0)

#endif
