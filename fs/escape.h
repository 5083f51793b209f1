/* escape.h - class names and other free text made safe for the stats files:
 * JSON strings and Prometheus label values. */
#ifndef ECHOFS_ESCAPE_H
#define ECHOFS_ESCAPE_H

/* s as the inside of a JSON string: '"' and '\' escaped, control characters
 * as \n, \t... or \u00XX, bytes that are not valid UTF-8 as \ufffd. Returns
 * a new string (caller frees). */
char *escape_json(const char *s);

/* s as a Prometheus label value (text exposition format): '\', '"' and
 * newline escaped as \\, \" and \n, bytes that are not valid UTF-8 as
 * U+FFFD. Returns a new string (caller frees). */
char *escape_prom(const char *s);

#endif
