/* control.h - the control files under MOUNTPOINT/.echofs: stats as JSON
 * (stats) and in Prometheus text format (stats.prom). */
#ifndef ECHOFS_CONTROL_H
#define ECHOFS_CONTROL_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>

struct namespace;
struct dataset;
struct push;
struct bindings;

/* Counters the FUSE handlers keep. */
struct fs_counters {
	_Atomic uint64_t reads;
	_Atomic uint64_t read_errors;
	_Atomic uint64_t bytes_served;
	_Atomic uint64_t ioctls;	 /* FUSE_IOCTL requests (ENOTTY) */
	_Atomic uint64_t lookups;	 /* FUSE_LOOKUP requests */
	_Atomic uint64_t opens;		 /* FUSE_OPEN requests */
	_Atomic uint64_t echo_stores;	 /* echo files stored at open */
};

/* Everything the stats are read from; all borrowed. The dataset's figures
 * include its disk store, echo pool (an echo mount: dataset_echoes) and
 * converted outputs. */
struct control_sources {
	const struct namespace *ns;
	struct dataset *ds;
	const struct fs_counters *fc;
	struct push *push; /* may be NULL */
	struct bindings *bind; /* echo mounts only, else NULL */
	struct inval *inval;   /* echo mounts binding at lookup, else NULL */
	uint64_t tar_skipped; /* members skipped when the index was built */
	uint64_t bad_label;   /* samples with a bad .cls, idem */
};

enum control_file { CONTROL_STATS_JSON, CONTROL_STATS_PROM, CONTROL_CONFIG };

struct control;

/* src is copied; what it points to must outlive the control. Never NULL
 * (small allocations abort on exhaustion). */
struct control *control_new(const struct control_sources *src);
/* Accepts NULL. */
void control_free(struct control *c);

/* Render a snapshot into a malloc'd buffer (caller frees). Returns 0 or
 * -ENOMEM. */
MUST_CHECK
int control_render(struct control *c, enum control_file which, char **out,
		   size_t *len);

/* Apply a write to .echofs/config: "key=value" lines, keys echo and
 * echo_mode. Returns 0, -EINVAL with a reason in err, or -EROFS on an exact
 * mount. */
MUST_CHECK
int control_configure(struct control *c, const char *text, size_t len,
		      char *err, size_t errlen);

/* One open handle's unfinished config line: write(2) may split a line, so
 * the bytes after a write's last newline wait here for the next write or
 * the close. CONTROL_LINE_MAX bounds them. */
#define CONTROL_LINE_MAX 1024
struct control_cfgbuf;
struct control_cfgbuf *control_cfgbuf_new(void);
/* Accepts NULL. */
void control_cfgbuf_free(struct control_cfgbuf *b);

/* A write(2) to an open .echofs/config: its complete lines (joined with b's
 * unfinished one) apply all or none, as control_configure; the bytes after
 * its last newline wait in b. Returns 0 or -errno as control_configure
 * (-EINVAL "line too long" when the unfinished line would pass
 * CONTROL_LINE_MAX); on an error nothing applies and b is as before. */
MUST_CHECK
int control_configure_write(struct control *c, struct control_cfgbuf *b,
			    const char *text, size_t len, char *err,
			    size_t errlen);
/* The handle closes: apply b's unfinished line, if any (0, or -errno as
 * control_configure). b is emptied either way. */
MUST_CHECK
int control_configure_close(struct control *c, struct control_cfgbuf *b,
			    char *err, size_t errlen);

#endif
