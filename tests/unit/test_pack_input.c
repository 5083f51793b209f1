/* test_pack_input.c - echofs-pack's input walk (tools/pack_input.c): what
 * it opens is decided from the file as opened, beneath the root, so no
 * symlink leads out of the tree, even one swapped in after listing, and
 * no FIFO blocks. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/unit/fixtures.h"
#include "tools/pack_input.h"

static char tdir[FX_TDIR_MAX], in_dir[FX_PATH_MAX], out_dir[FX_PATH_MAX];

static void put(const char *rel, const char *data)
{
	char p[256];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", in_dir, rel);
	f = fopen(p, "w");
	cr_assert(f, "%s", p);
	fputs(data, f);
	fclose(f);
}

static void link_at(const char *target, const char *rel)
{
	char p[256];

	snprintf(p, sizeof(p), "%s/%s", in_dir, rel);
	cr_assert_eq(symlink(target, p), 0, "%s", p);
}

/* in/ holds c/a.jpg; out/secret.jpg is outside it. */
static void setup(void)
{
	char p[256];

	fx_tree_make("pack-input", tdir, in_dir, out_dir);
	snprintf(p, sizeof(p), "%s/c", in_dir);
	cr_assert_eq(mkdir(p, 0755), 0);
	put("c/a.jpg", "inside");
	snprintf(p, sizeof(p), "%s/secret.jpg", tdir);
	FILE *f = fopen(p, "w");
	cr_assert(f);
	fputs("SECRET", f);
	fclose(f);
}

static void teardown(void)
{
	fx_rm_tree(tdir);
}

struct open_case {
	const char *rel;
	int err; /* 0: opens */
};

Test(pack_input, open_stays_beneath_the_root, .init = setup, .fini = teardown,
     .timeout = 10)
{
	static const struct open_case cases[] = {
		{"c/a.jpg", 0},
		{"c/out.jpg", -ELOOP},	   /* a symlink out */
		{"c/alias.jpg", -ELOOP},   /* a symlink inside: not followed */
		{"d/secret.jpg", -ELOOP},  /* through a symlinked directory */
		{"../secret.jpg", -EXDEV}, /* up and out */
		{"c/pipe.jpg", 0},	   /* a FIFO opens without blocking */
	};
	char target[256];
	int rootfd = open(in_dir, O_PATH | O_DIRECTORY);
	struct stat st;

	snprintf(target, sizeof(target), "%s/secret.jpg", tdir);
	link_at(target, "c/out.jpg");
	link_at("a.jpg", "c/alias.jpg");
	link_at(tdir, "d");
	snprintf(target, sizeof(target), "%s/c/pipe.jpg", in_dir);
	cr_assert_eq(mkfifo(target, 0644), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int fd = pack_input_open(rootfd, cases[i].rel, O_RDONLY, &st);
		if (cases[i].err) {
			cr_expect_eq(fd, cases[i].err, "%s: %d", cases[i].rel,
				     fd);
			continue;
		}
		cr_expect_geq(fd, 0, "%s: %d", cases[i].rel, fd);
		if (fd >= 0)
			close(fd);
	}
	/* A FIFO is opened (no reader blocks) and seen for what it is. */
	int fd = pack_input_open(rootfd, "c/pipe.jpg", O_RDONLY, &st);
	cr_assert_geq(fd, 0);
	cr_expect(S_ISFIFO(st.st_mode));
	close(fd);
	close(rootfd);
}

struct seen {
	char lines[8][512];
	int n;
};

static void record(void *arg, enum pack_skip reason, const char *path,
		   const char *why)
{
	struct seen *s = arg;

	if (s->n < 8)
		snprintf(s->lines[s->n++], sizeof(s->lines[0]), "%d %s: %s",
			 (int)reason, path, why);
}

Test(pack_input, a_file_swapped_for_a_link_after_listing_is_refused,
     .init = setup, .fini = teardown)
{
	struct pack_input in = {.threads = 1};
	char target[256], p[256];
	int rootfd;
	struct stat st;

	cr_assert_eq(pack_input_dir(&in, in_dir), 0, "%s", in.err);
	cr_assert_eq(in.nm, 1);
	/* Between listing and copying, the file becomes a link out. */
	snprintf(p, sizeof(p), "%s/c/a.jpg", in_dir);
	cr_assert_eq(unlink(p), 0);
	snprintf(target, sizeof(target), "%s/secret.jpg", tdir);
	link_at(target, "c/a.jpg");
	rootfd = open(in.root, O_PATH | O_DIRECTORY);
	cr_expect_eq(pack_input_open(rootfd, in.m[0].path + in.m[0].rel,
				     O_RDONLY, &st),
		     -ELOOP);
	close(rootfd);
	pack_input_free(&in);
}

Test(pack_input, skips_are_reported_in_order_and_counted, .init = setup,
     .fini = teardown, .timeout = 10)
{
	struct seen seen = {0};
	struct pack_input in = {
		.threads = 2, .on_skip = record, .on_skip_arg = &seen};
	char target[256], p[256];

	snprintf(target, sizeof(target), "%s/secret.jpg", tdir);
	link_at(target, "c/b.jpg");
	link_at("..", "c/up");
	snprintf(p, sizeof(p), "%s/c/fifo.jpg", in_dir);
	cr_assert_eq(mkfifo(p, 0644), 0);
	in.follow_links = true;
	cr_assert_eq(pack_input_dir(&in, in_dir), 0, "%s", in.err);
	cr_expect_eq(in.nm, 1);
	cr_expect_eq(in.skipped[PACK_SKIP_LINK_OUT], 1);
	cr_expect_eq(in.skipped[PACK_SKIP_SPECIAL], 1);
	cr_expect_eq(in.skipped[PACK_SKIP_LOOP], 1);
	cr_assert_eq(seen.n, 3);
	cr_expect(strstr(seen.lines[0], "/c/b.jpg: symlink to ") &&
			  strstr(seen.lines[0], "(leaves the input tree)"),
		  "%s", seen.lines[0]);
	cr_expect(strstr(seen.lines[1], "/c/fifo.jpg: a FIFO"), "%s",
		  seen.lines[1]);
	cr_expect(strstr(seen.lines[2], "/c/up: a directory loop"), "%s",
		  seen.lines[2]);
	pack_input_free(&in);
}
