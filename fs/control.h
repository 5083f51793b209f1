/* control.h - the control files under MOUNTPOINT/.echofs: stats as JSON
 * (stats) and in Prometheus text format (stats.prom). */
#ifndef ECHOFS_CONTROL_H
#define ECHOFS_CONTROL_H

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
int control_render(struct control *c, enum control_file which, char **out,
		   size_t *len);

/* Apply a write to .echofs/config: "key=value" lines, keys echo and
 * echo_mode. Returns 0, -EINVAL with a reason in err, or -EROFS on an exact
 * mount. */
int control_configure(struct control *c, const char *text, size_t len,
		      char *err, size_t errlen);

#endif
