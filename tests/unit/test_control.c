/* test_control.c - the control files (fs/control.c): stats as JSON and
 * Prometheus text rendered from real parts (a dataset over tar shards served
 * by the fault server, its disk store, the tree, an echo pool), and
 * .echofs/config reads and writes. */
#include "fs/control.h"

#include "cache/dataset.h"
#include "common/util.h"
#include "fixtures.h"
#include "fs/namespace.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NSHARDS 2
#define PER_SHARD 6
#define NCLASSES 3

static char tdir[64], root[96], cdir[96];
static struct fx_server srv;
static struct dataset *ds;
static struct namespace *ns;
static struct fs_counters fc;

/* Shard s holds PER_SHARD small images "s<s>_<k>.jpg", class k % 3. */
static void make_shards(void)
{
	for (int s = 0; s < NSHARDS; s++) {
		struct tarw t = {0};
		char name[64], path[160], label[8];
		uint8_t img[700];
		for (int k = 0; k < PER_SHARD; k++) {
			memset(img, 'a' + k, sizeof(img));
			snprintf(name, sizeof(name), "s%d_%04d.jpg", s, k);
			tarw_add(&t, name, img, sizeof(img));
			snprintf(label, sizeof(label), "%d", k % NCLASSES);
			snprintf(name, sizeof(name), "s%d_%04d.cls", s, k);
			tarw_add(&t, name, label, strlen(label));
		}
		tarw_end(&t);
		snprintf(path, sizeof(path), "%s/s%d.tar", root, s);
		fx_write_file(path, t.buf, t.len);
		tarw_free(&t);
	}
}

static void setup(void)
{
	char src[160], err[512] = "";

	snprintf(tdir, sizeof(tdir), "/tmp/echofs-control-XXXXXX");
	cr_assert_not_null(mkdtemp(tdir));
	snprintf(root, sizeof(root), "%s/www", tdir);
	snprintf(cdir, sizeof(cdir), "%s/cache", tdir);
	cr_assert_eq(mkdir(root, 0700), 0);
	make_shards();
	cr_assert_eq(dataset_global_init(), 0);
	fx_server_start(&srv, root, tdir, NULL);
	snprintf(src, sizeof(src), "http://127.0.0.1:%d/s{0..%d}.tar", srv.port,
		 NSHARDS - 1);
	struct dataset_opts o = {
		.source = src,
		.cache_dir = cdir,
		.cache_size = 64 << 20,
		.connections = 4,
		.boot_retry_budget_s = 2,
		.run_retry_budget_s = 5,
		/* what echo_pool() starts; exact until then */
		.echo = {.on = 1, .echo = 3, .mode = DATASET_ECHO_ADAPTIVE},
		.seed = 1,
	};
	int r = dataset_open(&o, &ds, err, sizeof(err));
	cr_assert_eq(r, 0, "dataset_open: %s (%s)", strerror(-r), err);
	cr_assert_eq(ns_open(ds, NULL, &ns), 0);
	memset(&fc, 0, sizeof(fc));
}

static void teardown(void)
{
	ns_free(ns);
	ns = NULL;
	dataset_close(ds);
	ds = NULL;
	fx_server_stop(&srv);
	fx_rm_tree(tdir);
}

TestSuite(control, .init = setup, .fini = teardown, .timeout = 60);

static struct control *exact_control(void)
{
	struct control_sources cs = {
		.ns = ns,
		.ds = ds,
		.fc = &fc,
		.tar_skipped = dataset_tar_skipped(ds),
	};
	return control_new(&cs);
}

static char *render(struct control *c, enum control_file which)
{
	char *buf = NULL;
	size_t len = 0;
	cr_assert_eq(control_render(c, which, &buf, &len), 0);
	cr_assert_not_null(buf);
	cr_assert_eq(strlen(buf), len, "length and NUL agree");
	return buf;
}

/* The rendering parses as JSON (Python's parser, a real peer). */
static void expect_valid_json(const char *json)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/stats.json", tdir);
	fx_write_file(path, json, strlen(json));
	if (access("/usr/bin/python3", X_OK) != 0)
		cr_skip_test("no /usr/bin/python3 to check the JSON with");
	char cmd[256];
	snprintf(cmd, sizeof(cmd),
		 "/usr/bin/python3 -c 'import json,sys; "
		 "json.load(open(sys.argv[1]))' %s",
		 path);
	int st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "invalid JSON:\n%s",
		  json);
}

static void expect_has(const char *text, const char *what)
{
	cr_expect_not_null(strstr(text, what), "missing %s in:\n%s", what,
			   text);
}

Test(control, stats_show_the_dataset_the_tree_and_the_counters)
{
	struct control *c = exact_control();
	uint8_t buf[700];

	/* Reads through the face: the shards are cached by the index build. */
	for (uint32_t i = 0; i < dataset_nsamples(ds); i++)
		cr_assert_eq(dataset_read(ds, i, 0, sizeof(buf), buf), 700);
	fc.reads = 5;
	fc.bytes_served = 1234;
	fc.read_errors = 2;
	char *json = render(c, CONTROL_STATS_JSON);

	expect_valid_json(json);
	expect_has(json, "\"version\": \"" ECHOFS_VERSION "\"");
	expect_has(json, "\"samples\": 12,");
	expect_has(json, "\"shards\": 2,");
	expect_has(json, "\"classes\": 3,");
	expect_has(json, "\"shards_cached\": 2,");
	expect_has(json, "\"reads\": 5,");
	expect_has(json, "\"bytes_served\": 1234,");
	expect_has(json, "\"cache_hits\": 12,");
	expect_has(json, "\"cache_size\": 67108864,");
	expect_has(json, "\"read\": 2,");
	expect_has(json, "\"bad_label\": 0");
	cr_expect_null(strstr(json, "\"echo_mode\""), "exact mount: no echo");
	cr_expect_null(strstr(json, "\"ready\""), "exact mount: no pool");
	free(json);
	control_free(c);
}

/* Every sample line of the Prometheus text, with its value, is the same
 * figure in the JSON, and has its HELP and TYPE. */
static void expect_prom_matches_json(const char *prom, const char *json)
{
	const char *p = prom;
	int samples = 0;
	while (*p) {
		const char *nl = strchr(p, '\n');
		cr_assert_not_null(nl, "last line ends with a newline");
		char line[256], name[128], value[64], want[200];
		size_t n = (size_t)(nl - p);
		cr_assert_lt(n, sizeof(line));
		memcpy(line, p, n);
		line[n] = '\0';
		p = nl + 1;
		if (line[0] == '#')
			continue;
		cr_assert_eq(sscanf(line, "echofs_%127s %63s", name, value), 2,
			     "line '%s'", line);
		samples++;
		if (strcmp(name, "uptime_s") == 0 ||
		    strcmp(name, "fetch_rate_bps") == 0 ||
		    strncmp(name, "rss_", 4) == 0)
			continue; /* moves between the two renderings */
		char kind[64];
		if (sscanf(name, "errors_total{kind=\"%63[^\"]\"}", kind) == 1)
			snprintf(want, sizeof(want), "\"%s\": %s", kind, value);
		else if (sscanf(name, "ready{class=\"%63[^\"]\"}", kind) == 1)
			snprintf(want, sizeof(want), "\"%s\": %s", kind, value);
		else if (sscanf(name, "echo_reason{reason=\"%63[^\"]\"}", kind) == 1)
			/* The governor's last reason: a string in the JSON. */
			snprintf(want, sizeof(want), "\"echo_reason\": \"%s\"", kind);
		else {
			snprintf(want, sizeof(want), "\"%s\": %s", name, value);
			char help[160];
			snprintf(help, sizeof(help), "# TYPE echofs_%s ", name);
			expect_has(prom, help);
			snprintf(help, sizeof(help), "# HELP echofs_%s ", name);
			expect_has(prom, help);
		}
		expect_has(json, want);
	}
	cr_expect_gt(samples, 30);
}

Test(control, prometheus_text_lists_the_same_figures)
{
	struct control *c = exact_control();
	fc.reads = 7;
	char *json = render(c, CONTROL_STATS_JSON);
	char *prom = render(c, CONTROL_STATS_PROM);

	expect_has(prom, "# TYPE echofs_errors_total counter\n");
	expect_has(prom, "echofs_errors_total{kind=\"shard_failed\"} 0\n");
	expect_has(prom, "echofs_reads 7\n");
	expect_prom_matches_json(prom, json);
	free(json);
	free(prom);
	control_free(c);
}

Test(control, exact_mount_config_is_read_only)
{
	struct control *c = exact_control();
	char err[256] = "";
	char *cfg = render(c, CONTROL_CONFIG);

	expect_has(cfg, "\necho=1\n");
	cr_expect_eq(control_configure(c, "echo=2\n", 7, err, sizeof(err)),
		     -EROFS);
	expect_has(err, "remount");
	free(cfg);
	control_free(c);
}

/* An echo mount's control: the dataset's real pool (ended with
 * dataset_echo_end). */
static void echo_pool(void)
{
	size_t n = dataset_nsamples(ds);
	uint32_t *class_of = xmalloc(n * sizeof(*class_of));
	char err[256] = "";
	for (size_t i = 0; i < n; i++)
		class_of[i] = DATASET_NO_CLASS;
	for (size_t f = 0; f < ns->nfiles; f++)
		class_of[ns->files[f].sample] = ns->files[f].cls;
	int r = dataset_echo_start(ds, class_of, (uint32_t)ns->nclasses, err,
				   sizeof(err));
	free(class_of);
	cr_assert_eq(r, 0, "dataset_echo_start: %s", err);
}

/* The JSON with the figures that move on their own (uptime, fetch rate,
 * the daemon's memory) blanked, for comparing two renderings. */
static void blank_clock(char *json)
{
	static const char *const moving[] = {
		"\"uptime_s\": ", "\"fetch_rate_bps\": ",
		"\"rss_anon_bytes\": ", "\"rss_file_bytes\": "};
	for (size_t i = 0; i < sizeof(moving) / sizeof(moving[0]); i++) {
		char *q = strstr(json, moving[i]);
		for (q = q ? q + strlen(moving[i]) : NULL; q && *q && *q != ',';)
			*q++ = ' ';
	}
}

/* An echo pool's streamer fills its queues on its own thread: wait (at
 * most 10 s) until two renderings 20 ms apart agree, so that the JSON and
 * Prometheus renderings that follow show the same figures. */
static void wait_settled(struct control *c)
{
	for (int i = 0; i < 500; i++) {
		char *a = render(c, CONTROL_STATS_JSON), *b;
		usleep(20000);
		b = render(c, CONTROL_STATS_JSON);
		blank_clock(a);
		blank_clock(b);
		int same = strcmp(a, b) == 0;
		free(a);
		free(b);
		if (same)
			return;
	}
	cr_assert_fail("the echo pool's figures never settled");
}

Test(control, echo_mount_stats_and_config)
{
	echo_pool();
	struct control_sources cs = {
		.ns = ns,
		.ds = ds,
		.fc = &fc,
	};
	struct control *c = control_new(&cs);
	wait_settled(c);
	char *json = render(c, CONTROL_STATS_JSON);
	char *prom = render(c, CONTROL_STATS_PROM);
	char *cfg = render(c, CONTROL_CONFIG);

	expect_valid_json(json);
	expect_has(json, "\"echo_mode\": \"adaptive\"");
	expect_has(json, "\"echo_reason\": \"start\"");
	expect_has(json, "\"echo_factor\": 1,");
	expect_has(prom, "echofs_echo_reason{reason=\"start\"} 1\n");
	expect_has(json, "\"echo\": 3,");
	expect_has(json, "\"ready\": {\"0\": ");
	expect_has(json, ", \"2\": ");
	expect_has(prom, "echofs_ready{class=\"1\"} ");
	expect_prom_matches_json(prom, json);
	cr_expect_str_eq(cfg, "echo=3\necho_mode=adaptive\n");
	free(json);
	free(prom);
	free(cfg);
	control_free(c);
	dataset_echo_end(ds);
}

/* Writes to .echofs/config: applied whole or not at all. */
static const struct {
	const char *text;
	int ret;
	const char *reason; /* in err when ret != 0 */
	const char *after;  /* config rendered afterwards */
} writes[] = {
	{"echo=2.5\necho_mode=fixed\n", 0, NULL, "echo=2.5\necho_mode=fixed\n"},
	{"  echo=4  \r\n# a comment\n\n", 0, NULL,
	 "echo=4\necho_mode=adaptive\n"},
	{"echo=0.5\n", -EINVAL, "bad echo", "echo=3\necho_mode=adaptive\n"},
	{"echo=1001", -EINVAL, "bad echo", "echo=3\necho_mode=adaptive\n"},
	{"echo=nan", -EINVAL, "bad echo", "echo=3\necho_mode=adaptive\n"},
	{"echo_mode=sometimes", -EINVAL, "bad echo_mode",
	 "echo=3\necho_mode=adaptive\n"},
	{"echo=7\ncolour=blue\n", -EINVAL, "unknown setting",
	 "echo=3\necho_mode=adaptive\n"},
	{"echo 7\n", -EINVAL, "want key=value", "echo=3\necho_mode=adaptive\n"},
	{"echo=2222222222222222222222222222222222222222222222222222222222222222"
	 "222222222222222222222222222222222222222222222222222222222222222222",
	 -EINVAL, "too long", "echo=3\necho_mode=adaptive\n"},
};

Test(control, config_writes_apply_whole_or_not_at_all)
{
	for (size_t i = 0; i < ARRAY_SIZE(writes); i++) {
		echo_pool();
		struct control_sources cs = {.ns = ns, .ds = ds, .fc = &fc};
		struct control *c = control_new(&cs);
		char err[256] = "";
		int r = control_configure(c, writes[i].text,
					  strlen(writes[i].text), err,
					  sizeof(err));
		cr_expect_eq(r, writes[i].ret, "write %zu: %d (%s)", i, r, err);
		if (writes[i].reason)
			cr_expect_not_null(strstr(err, writes[i].reason),
					   "write %zu: reason '%s'", i, err);
		char *cfg = render(c, CONTROL_CONFIG);
		cr_expect_str_eq(cfg, writes[i].after, "write %zu", i);
		free(cfg);
		control_free(c);
		dataset_echo_end(ds);
	}
}
