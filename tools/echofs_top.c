/* echofs_top.c - echofs-top: the live rates of an echofs mount, read from
 * MOUNTPOINT/.echofs/stats.prom every interval and shown like top.
 *
 * Every rate is a difference of two reads of the counters divided by the
 * time between them (the mount's uptime_s, so the daemon's own clock).
 * "stall %" is delta stall_s / delta t x 100: seconds readers spent waiting
 * for fresh data per wall-clock second. Waits of concurrent readers add up,
 * so with several readers it can exceed 100 (8 readers all waiting: 800).
 * The parser is strict: a line naming an echofs metric whose value is not a
 * finite number (strtod, endptr checked) is counted as malformed and shown;
 * comments, other metrics' lines and unknown labels are ignored. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/file.h"
#include "common/util.h"

#define PROG "echofs-top"
#define STATS_FILE "/.echofs/stats.prom"
#define MAX_STATS_BYTES (16u << 20) /* 1000s of classes fit many times */
#define MAX_ENTRIES 1000000u
#define MIN_DELAY 0.05
#define MAX_DELAY 86400.0
#define MB 1e6

/* Metric values by name (or label value), in file order. */
struct entry {
	char *name;
	double value;
};

struct table {
	struct entry *v;
	size_t n, cap;
};

/* One read of stats.prom. */
struct sample {
	double t;	     /* local monotonic clock at the read */
	struct table scalar; /* echofs_<name> <value> */
	struct table errors; /* echofs_errors_total{kind="..."} */
	struct table ready;  /* echofs_ready{class="..."} */
	struct table reason; /* echofs_echo_reason{reason="..."} 1 */
	unsigned malformed;  /* echofs lines whose value did not parse */
};

struct opts {
	const char *mnt;
	double delay;
	uint64_t count; /* 0: until interrupted */
	bool once;
};

static void usage(FILE *f)
{
	fputs("usage: " PROG " [-n COUNT] [-d SECONDS] [--once] MOUNTPOINT\n"
	      "\n"
	      "Show the live rates of an echofs mount, read from\n"
	      "MOUNTPOINT/.echofs/stats.prom every interval. On a\n"
	      "terminal the screen is redrawn in place; otherwise one\n"
	      "block is printed per refresh. Rates need two reads, so\n"
	      "the first refresh comes after one interval.\n"
	      "\n"
	      "  -d, --delay SECONDS  seconds between reads (default 1)\n"
	      "  -n, --count COUNT    stop after COUNT refreshes\n"
	      "      --once           one plain snapshot (two reads -d\n"
	      "                       apart), no terminal control codes\n"
	      "  -h, --help           this help\n"
	      "  -V, --version        print the version\n"
	      "\n"
	      "fresh/s, echoes/s    samples served fresh / echoed\n"
	      "opens/s              both together\n"
	      "fetch MB/s           HTTP body bytes (MB = 10^6 bytes)\n"
	      "stall %              delta stall_s / delta t x 100: time\n"
	      "                     readers waited for fresh data per\n"
	      "                     second; waits of concurrent readers\n"
	      "                     add up, so it can exceed 100\n"
	      "effective e          served / fresh over the mount's life\n"
	      "interval e           served / fresh over the interval\n"
	      "pass, pool MB        dataset pass, echo pool memory\n"
	      "echo factor          echoes per fresh sample allowed now\n"
	      "                     (adaptive mode: the governor's pick)\n"
	      "gov fresh/s, best    fresh/s it measured there, and the\n"
	      "                     best at any factor\n"
	      "echo age p10, p50    opens of a class between an echo and\n"
	      "                     the sample's last serve\n"
	      "cache hits/s, misses/s, reads/s, served MB/s\n"
	      "errors, new errors   total, and new ones by kind\n"
	      "class / ready        fresh samples ready per class\n"
	      "Echo figures and classes appear on echo mounts only.\n",
	      f);
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One line on stderr; returns the exit status. */
static int fail(const char *fmt, ...)
{
	va_list ap;

	fputs(PROG ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

/* ---- tables ---- */

static struct entry *table_find(const struct table *t, const char *name,
				size_t len)
{
	for (size_t i = 0; i < t->n; i++)
		if (strlen(t->v[i].name) == len &&
		    memcmp(t->v[i].name, name, len) == 0)
			return &t->v[i];
	return NULL;
}

/* A repeated name keeps the last value, as a Prometheus scrape would. */
static int table_set(struct table *t, const char *name, size_t len,
		     double value)
{
	struct entry *e = table_find(t, name, len);

	if (e) {
		e->value = value;
		return 0;
	}
	if (t->n >= MAX_ENTRIES)
		return -E2BIG;
	if (t->n == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 32;
		t->v = xrealloc(t->v, t->cap * sizeof(*t->v));
	}
	t->v[t->n++] = (struct entry){xstrndup(name, len), value};
	return 0;
}

static bool table_get(const struct table *t, const char *name, double *out)
{
	const struct entry *e = table_find(t, name, strlen(name));

	if (e)
		*out = e->value;
	return e != NULL;
}

static void table_free(struct table *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->v[i].name);
	free(t->v);
	memset(t, 0, sizeof(*t));
}

static void sample_free(struct sample *s)
{
	if (!s)
		return;
	table_free(&s->scalar);
	table_free(&s->errors);
	table_free(&s->ready);
	table_free(&s->reason);
	s->malformed = 0;
}

/* ---- parsing ---- */

static bool name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '_' || c == ':';
}

/* Strict: optional blanks, a finite number, optional blanks, end. */
static int parse_value(const char *s, double *out)
{
	char *end;

	while (*s == ' ' || *s == '\t')
		s++;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || errno == ERANGE || !isfinite(v))
		return -EINVAL;
	while (*end == ' ' || *end == '\t')
		end++;
	if (*end)
		return -EINVAL;
	*out = v;
	return 0;
}

/* The table a labelled metric goes to and the label it must carry; NULL for
 * labelled metrics we do not show. */
static struct table *labelled(struct sample *s, const char *name, size_t len,
			      const char **label)
{
	if (len == 12 && memcmp(name, "errors_total", 12) == 0) {
		*label = "kind=\"";
		return &s->errors;
	}
	if (len == 5 && memcmp(name, "ready", 5) == 0) {
		*label = "class=\"";
		return &s->ready;
	}
	if (len == 11 && memcmp(name, "echo_reason", 11) == 0) {
		*label = "reason=\"";
		return &s->reason;
	}
	return NULL;
}

/* `{label="value"} number` after a labelled name. The value ends at the
 * last `"}` of the line, so a class name holding `"` still works. */
static int parse_labels(struct table *t, const char *label, const char *p)
{
	size_t ll = strlen(label);
	const char *close = NULL, *q = p;
	double v;

	if (strncmp(p + 1, label, ll) != 0)
		return 0; /* some other label: not ours to show */
	while ((q = strstr(q, "\"}")) != NULL)
		close = q++;
	const char *start = p + 1 + ll;
	if (!close || close < start || (close[2] != ' ' && close[2] != '\t'))
		return -EINVAL;
	if (parse_value(close + 2, &v))
		return -EINVAL;
	return table_set(t, start, (size_t)(close - start), v);
}

/* One line (NUL-terminated, no newline): stored, ignored, or -EINVAL. */
static int parse_line(struct sample *s, const char *line)
{
	const char *name = line + 7, *p = name;
	const char *label = NULL;
	double v;

	if (strncmp(line, "echofs_", 7) != 0)
		return 0; /* comments, blank lines, other exporters */
	while (name_char(*p))
		p++;
	size_t len = (size_t)(p - name);
	if (len == 0)
		return -EINVAL;
	if (*p == '{') {
		struct table *t = labelled(s, name, len, &label);
		return t ? parse_labels(t, label, p) : 0;
	}
	if (*p != ' ' && *p != '\t')
		return -EINVAL;
	if (parse_value(p, &v))
		return -EINVAL;
	return table_set(&s->scalar, name, len, v);
}

/* Parse a whole stats.prom text (modified in place: lines are cut). */
static int parse_text(struct sample *s, char *text)
{
	char *line = text;

	while (line && *line) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		size_t len = strlen(line);
		if (len && line[len - 1] == '\r')
			line[len - 1] = '\0';
		int r = parse_line(s, line);
		if (r == -E2BIG)
			return r;
		if (r)
			s->malformed++;
		line = nl ? nl + 1 : NULL;
	}
	return 0;
}

/* ---- reading ---- */

/* Read and parse MNT/.echofs/stats.prom into *s. Returns 0 or -errno;
 * -ENOENT / -ENOTDIR mean "not an echofs mount". */
static int sample_read(const char *mnt, struct sample *s)
{
	char path[4096], *text = NULL;

	memset(s, 0, sizeof(*s));
	if (snprintf(path, sizeof(path), "%s%s", mnt, STATS_FILE) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	s->t = now_mono();
	/* Control files may report any st_size: read to EOF, capped. */
	size_t len;
	int rr = file_read_fd(fd, MAX_STATS_BYTES, &text, &len);
	close(fd);
	if (rr < 0)
		return rr;
	int r = parse_text(s, text);
	free(text);
	if (r)
		sample_free(s);
	return r;
}

/* ---- rendering ---- */

/* Where the block goes: on a tty, lines are clipped to the screen. */
struct view {
	FILE *f;
	bool tty;
	int rows, used;
};

static void emit(struct view *v, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void emit(struct view *v, const char *fmt, ...)
{
	va_list ap;

	if (v->tty && v->used >= v->rows - 1)
		return;
	va_start(ap, fmt);
	vfprintf(v->f, fmt, ap);
	va_end(ap);
	/* erase what the previous frame left on this line */
	fputs(v->tty ? "\033[K\n" : "\n", v->f);
	v->used++;
}

/* The interval between two samples. */
struct delta {
	const struct sample *a, *b;
	double dt;
};

static double gauge(const struct sample *s, const char *name)
{
	double v;
	return table_get(&s->scalar, name, &v) ? v : NAN;
}

/* Counter increase over the interval; NAN when missing or reset (the
 * mount was restarted between the reads). */
static double diff(const struct delta *d, const char *name)
{
	double x = gauge(d->a, name), y = gauge(d->b, name);
	return isnan(x) || isnan(y) || y < x ? NAN : y - x;
}

static double rate(const struct delta *d, const char *name)
{
	return d->dt > 0 ? diff(d, name) / d->dt : NAN;
}

/* A value right-aligned in 10 columns, "-" when unknown. */
static const char *fmt_num(char *buf, size_t len, double v, int prec)
{
	if (isnan(v))
		snprintf(buf, len, "%10s", "-");
	else
		snprintf(buf, len, "%10.*f", prec, v);
	return buf;
}

/* Three "label value" cells on one line; NULL label ends the line early. */
struct cell {
	const char *label;
	double value;
	int prec;
};

static void cells(struct view *v, const struct cell *c, size_t n)
{
	char line[256], num[64];
	size_t off = 0;

	line[0] = '\0';
	for (size_t i = 0; i < n && off < sizeof(line); i++) {
		int w = snprintf(
			line + off, sizeof(line) - off, "%s%-13s%s",
			i ? "   " : "", c[i].label,
			fmt_num(num, sizeof(num), c[i].value, c[i].prec));
		if (w < 0)
			break;
		off += (size_t)w;
	}
	emit(v, "%s", line);
}

static void render_header(struct view *v, const char *mnt,
			  const struct delta *d, bool echo)
{
	char e[64] = "";
	if (echo)
		snprintf(e, sizeof(e), ", E %g", gauge(d->b, "echo"));
	emit(v, PROG " - %s - %s%s - interval %.2f s, uptime %.0f s", mnt,
	     echo ? "echo mount" : "exact mount", e, d->dt,
	     gauge(d->b, "uptime_s"));
}

/* served / fresh over the interval: NAN when nothing fresh was served. */
static double interval_echo(const struct delta *d)
{
	double f = diff(d, "fresh_served"), e = diff(d, "echoes_served");
	return f > 0 ? (f + e) / f : NAN;
}

static void render_echo(struct view *v, const struct delta *d)
{
	double fresh = rate(d, "fresh_served"),
	       echoes = rate(d, "echoes_served");
	const struct cell l1[] = {{"fresh/s", fresh, 1},
				  {"echoes/s", echoes, 1},
				  {"opens/s", fresh + echoes, 1}};
	const struct cell l2[] = {
		{"stall %", rate(d, "stall_s") * 100, 1},
		{"effective e", gauge(d->b, "effective_echo"), 2},
		{"interval e", interval_echo(d), 2}};
	const struct cell l3[] = {
		{"pass", gauge(d->b, "pass"), 0},
		{"pool MB", gauge(d->b, "pool_bytes") / MB, 2},
		{"pool samples", gauge(d->b, "pool_samples"), 0}};
	/* The adaptive mode's governor: the factor it allows, the fresh
	 * rate it measured there and the best it saw, why it last moved. */
	const struct cell l4[] = {
		{"echo factor", gauge(d->b, "echo_factor"), 2},
		{"gov fresh/s", gauge(d->b, "echo_fresh_rate"), 1},
		{"best fresh/s", gauge(d->b, "echo_best_fresh_rate"), 1}};
	const struct cell l5[] = {
		{"echo age p10", gauge(d->b, "echo_age_p10"), 0},
		{"echo age p50", gauge(d->b, "echo_age_p50"), 0},
		{"factor changes", gauge(d->b, "echo_changes"), 0}};
	const struct table *r = &d->b->reason;

	cells(v, l1, ARRAY_SIZE(l1));
	cells(v, l2, ARRAY_SIZE(l2));
	cells(v, l3, ARRAY_SIZE(l3));
	cells(v, l4, ARRAY_SIZE(l4));
	cells(v, l5, ARRAY_SIZE(l5));
	for (size_t i = 0; i < r->n; i++)
		if (r->v[i].value == 1)
			emit(v, "  last change of the echo factor: %s", r->v[i].name);
}

static void render_io(struct view *v, const struct delta *d)
{
	const struct cell l1[] = {
		{"fetch MB/s", rate(d, "bytes_fetched") / MB, 2},
		{"cache hits/s", rate(d, "cache_hits"), 1},
		{"misses/s", rate(d, "cache_misses"), 1}};
	const struct cell l2[] = {
		{"reads/s", rate(d, "reads"), 1},
		{"served MB/s", rate(d, "bytes_served") / MB, 2},
		{"shards cached", gauge(d->b, "shards_cached"), 0}};
	/* Demand first (issue 46): the share of the interval readers spent
	 * waiting for the network, that wait in the pass so far, and the
	 * range GETs that spared them a whole shard. "-" until the mount
	 * reports them. */
	const struct cell l3[] = {
		{"net wait %", rate(d, "net_wait_s") * 100, 1},
		{"pass wait s", gauge(d->b, "net_wait_pass_s"), 1},
		{"range reads/s", rate(d, "range_reads"), 1}};

	cells(v, l1, ARRAY_SIZE(l1));
	cells(v, l2, ARRAY_SIZE(l2));
	cells(v, l3, ARRAY_SIZE(l3));
}

/* Total errors and, by kind, the ones new in this interval. */
static void render_errors(struct view *v, const struct delta *d)
{
	char news[512] = "";
	size_t off = 0;
	double total = 0, added = 0, was;

	for (size_t i = 0; i < d->b->errors.n; i++) {
		const struct entry *e = &d->b->errors.v[i];
		total += e->value;
		if (!table_get(&d->a->errors, e->name, &was))
			was = 0;
		if (e->value <= was || off >= sizeof(news))
			continue;
		added += e->value - was;
		int w = snprintf(news + off, sizeof(news) - off, " +%.0f %s",
				 e->value - was, e->name);
		off += w > 0 ? (size_t)w : 0;
	}
	emit(v, "%-13s%10.0f   %-13s%10.0f%s%s", "errors", total, "new errors",
	     added, added > 0 ? "  " : "", news);
	if (d->b->malformed)
		emit(v, "warning: %u malformed line(s) in stats.prom",
		     d->b->malformed);
}

static void render_ready(struct view *v, const struct sample *s)
{
	const struct table *t = &s->ready;

	emit(v, "%-24s %10s", "class", "ready");
	for (size_t i = 0; i < t->n; i++) {
		if (v->tty && v->used >= v->rows - 2 && i + 1 < t->n) {
			emit(v, "... %zu more classes", t->n - i);
			return;
		}
		emit(v, "%-24s %10.0f", t->v[i].name, t->v[i].value);
	}
}

/* Time between the reads by the daemon's clock, else by ours. */
static double interval_of(const struct sample *a, const struct sample *b)
{
	double dt = gauge(b, "uptime_s") - gauge(a, "uptime_s");
	return dt > 0 ? dt : b->t - a->t;
}

static void render(struct view *v, const char *mnt, const struct sample *a,
		   const struct sample *b)
{
	struct delta d = {a, b, interval_of(a, b)};
	bool echo = !isnan(gauge(b, "echo"));

	v->used = 0;
	if (v->tty)
		fputs("\033[H", v->f);
	render_header(v, mnt, &d, echo);
	if (echo)
		render_echo(v, &d);
	render_io(v, &d);
	render_errors(v, &d);
	if (echo)
		render_ready(v, b);
	fputs(v->tty ? "\033[J" : "\n", v->f);
	fflush(v->f);
}

/* ---- main ---- */

static int terminal_rows(void)
{
	struct winsize ws;

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 2)
		return ws.ws_row;
	return 24;
}

static int parse_delay(const char *s, double *out)
{
	double v;

	if (parse_value(s, &v) || v < MIN_DELAY || v > MAX_DELAY)
		return -EINVAL;
	*out = v;
	return 0;
}

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, struct opts *o)
{
	enum { OPT_ONCE = 256 };
	static const struct option longs[] = {
		{"delay", required_argument, NULL, 'd'},
		{"count", required_argument, NULL, 'n'},
		{"once", no_argument, NULL, OPT_ONCE},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0}};
	int c;

	*o = (struct opts){.delay = 1.0};
	while ((c = getopt_long(argc, argv, "d:n:hV", longs, NULL)) != -1) {
		switch (c) {
		case 'd':
			if (parse_delay(optarg, &o->delay))
				return fail("bad -d '%s' (seconds, %g to %g)",
					    optarg, MIN_DELAY, MAX_DELAY);
			break;
		case 'n':
			if (parse_u64(optarg, &o->count) || o->count == 0)
				return fail("bad -n '%s' (a count from 1)",
					    optarg);
			break;
		case OPT_ONCE:
			o->once = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf(PROG " " ECHOFS_VERSION "\n");
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		return 2;
	}
	o->mnt = argv[optind];
	return -1;
}

/* The first read, with the error messages a user needs. */
static int first_read(const char *mnt, struct sample *s)
{
	struct stat st;

	if (stat(mnt, &st) != 0)
		return fail("%s: %s", mnt, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return fail("%s: not a directory", mnt);
	int r = sample_read(mnt, s);
	if (r == -ENOENT || r == -ENOTDIR)
		return fail("%s: not an echofs mount (no .echofs/stats.prom)",
			    mnt);
	if (r)
		return fail("%s" STATS_FILE ": %s", mnt, strerror(-r));
	if (s->scalar.n == 0 || isnan(gauge(s, "uptime_s"))) {
		sample_free(s);
		return fail("%s: not an echofs mount (.echofs/stats.prom holds "
			    "no echofs metrics)",
			    mnt);
	}
	return 0;
}

/* Sleep until *next on the monotonic clock, then move *next on by delay, so
 * refreshes do not drift by the time spent reading and drawing. */
static void sleep_until(struct timespec *next, double delay)
{
	long long ns = next->tv_nsec + (long long)(delay * 1e9);

	next->tv_sec += (time_t)(ns / 1000000000);
	next->tv_nsec = (long)(ns % 1000000000);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, next, NULL) ==
	       EINTR)
		;
}

static int run(const struct opts *o)
{
	struct sample a, b;
	struct timespec next;
	struct view v = {stdout, false, 0, 0};

	v.tty = !o->once && isatty(STDOUT_FILENO);
	int r = first_read(o->mnt, &a);
	if (r)
		return r;
	clock_gettime(CLOCK_MONOTONIC, &next);
	if (v.tty)
		fputs("\033[H\033[2J", stdout);
	for (uint64_t i = 0; o->count == 0 || i < o->count; i++) {
		sleep_until(&next, o->delay);
		r = sample_read(o->mnt, &b);
		if (r) {
			sample_free(&a);
			return fail("%s" STATS_FILE ": %s", o->mnt,
				    strerror(-r));
		}
		v.rows = v.tty ? terminal_rows() : 0;
		render(&v, o->mnt, &a, &b);
		sample_free(&a);
		a = b;
	}
	sample_free(&a);
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	int r = parse_args(argc, argv, &o);

	if (r >= 0)
		return r;
	if (o.once)
		o.count = 1;
	return run(&o);
}
