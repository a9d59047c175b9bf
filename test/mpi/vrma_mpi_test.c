/*
 * vrma_mpi_test: MPI point-to-point and collective checks for vrma's RDM
 * endpoint under Open MPI (pml cm + mtl ofi), also runnable over any other
 * transport (pml ob1 + btl self,vader on one host, for instance).
 *
 * Every payload is a pattern that depends on the test, sender, receiver,
 * size and iteration, and is checked byte by byte; every receive checks
 * MPI_SOURCE, MPI_TAG and MPI_Get_count, and is posted with a larger count
 * than the message, so that a write past the message's end is caught too.
 *
 * Output (TAP): "1..K", then per test "ok N - name" or
 * "not ok N - name: rank R: detail" (first wrong byte, or wrong status
 * field), then the bytes moved and "vrma_mpi_test: all K tests passed on R
 * ranks". A failure ends the job through MPI_Abort (non-zero exit).
 *
 * Traffic: "bytes moved between ranks" is the payload each rank sends to
 * others (collectives: what the data needs to travel at least). Defaults:
 * about 111 MB on 2 ranks, 231 MB on 4 (the VM's soft-RoCE does ~30 MB/s);
 * -s caps the size sweeps and the big messages of every test.
 *
 * Build: mpicc -O2 -Wall -Wextra -Werror -o vrma_mpi_test vrma_mpi_test.c
 * Run:   test/mpi/run-mpi.sh ./vrma_mpi_test vrma -np 4
 * Usage: vrma_mpi_test [-t name[,name...]] [-s max_size] [-T seconds] [-v]
 */
#define _GNU_SOURCE
#include <mpi.h>

#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)
/* Receives are posted GUARD bytes larger than the message (at least). */
#define GUARD 16
#define GUARD_BYTE 0xA5

static int rank, nranks;
static size_t max_size = 16 * MiB;
static unsigned timeout_s = 300;
static int verbose;

static int cur_num;
static const char *cur_name = "setup";
static char err[512];                   /* this rank's first failure */
static uint64_t bytes_net, bytes_self;  /* payload sent to other ranks / to self */
static const char *volatile phase = ""; /* where a timeout happened */
static char tmo_prefix[256];

/* ------------------------------------------------------------------ */
/* Failure reporting                                                   */

static void wr(const char *s)
{
	ssize_t r = write(STDOUT_FILENO, s, strlen(s));
	(void)r;
}

static void on_alarm(int sig)
{
	(void)sig;
	wr(tmo_prefix);
	wr(phase);
	wr("\n");
	MPI_Abort(MPI_COMM_WORLD, 3);
	_exit(3);
}

/* An MPI call failed: communication is broken, so end at once. */
static void mpi_fatal(const char *call, int rc, int line)
{
	char es[MPI_MAX_ERROR_STRING];
	int len = 0;
	if (MPI_Error_string(rc, es, &len) != MPI_SUCCESS)
		snprintf(es, sizeof es, "error code %d", rc);
	printf("not ok %d - %s: rank %d: %s failed (line %d): %s\n", cur_num, cur_name, rank, call,
	       line, es);
	fflush(stdout);
	MPI_Abort(MPI_COMM_WORLD, 2);
	exit(2);
}
#define M(call)                                                                                    \
	do {                                                                                       \
		int rc_ = (call);                                                                  \
		if (rc_ != MPI_SUCCESS)                                                            \
			mpi_fatal(#call, rc_, __LINE__);                                           \
	} while (0)

/* Records this rank's first failure; the test goes on so that every
 * message is still matched, and end_test() reports it. */
__attribute__((format(printf, 1, 2))) static void fail(const char *fmt, ...)
{
	va_list ap;
	int n;
	if (err[0])
		return;
	n = snprintf(err, sizeof err, "rank %d: ", rank);
	va_start(ap, fmt);
	vsnprintf(err + n, sizeof err - (size_t)n, fmt, ap);
	va_end(ap);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p) {
		printf("not ok %d - %s: rank %d: malloc(%zu) failed\n", cur_num, cur_name, rank, n);
		fflush(stdout);
		MPI_Abort(MPI_COMM_WORLD, 2);
		exit(2);
	}
	return p;
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* ------------------------------------------------------------------ */
/* Patterns and checks                                                 */

static uint32_t seed_of(int test, int src, int dst, size_t size, int iter)
{
	uint64_t v[5] = {(uint64_t)test, (uint64_t)src, (uint64_t)dst, (uint64_t)size, (uint64_t)iter};
	uint64_t h = 0x9E3779B97F4A7C15ull;
	for (int i = 0; i < 5; i++) {
		h ^= v[i] + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
		h *= 0xFF51AFD7ED558CCDull;
		h ^= h >> 33;
	}
	return (uint32_t)(h ^ (h >> 32));
}

static inline uint8_t pat(uint32_t seed, size_t i)
{
	return (uint8_t)(((seed + (uint32_t)i) * 2654435761u) >> 24);
}

static void fill(void *buf, size_t n, uint32_t seed)
{
	uint8_t *b = buf;
	for (size_t i = 0; i < n; i++)
		b[i] = pat(seed, i);
}

/* Before a receive of up to cap bytes: everything the message must not
 * touch reads GUARD_BYTE afterwards. */
static void prep_recv(void *buf, size_t cap) { memset(buf, GUARD_BYTE, cap); }

static int check_data(const void *buf, size_t n, uint32_t seed, const char *ctx)
{
	const uint8_t *b = buf;
	for (size_t i = 0; i < n; i++)
		if (b[i] != pat(seed, i)) {
			fail("%s: byte %zu of %zu is 0x%02x, expected 0x%02x", ctx, i, n, b[i],
			     pat(seed, i));
			return 0;
		}
	return 1;
}

/* Bytes [from, to) of buf must still be GUARD_BYTE. */
static int check_guard(const void *buf, size_t from, size_t to, const char *ctx)
{
	const uint8_t *b = buf;
	for (size_t i = from; i < to; i++)
		if (b[i] != GUARD_BYTE) {
			fail("%s: byte %zu, past the %zu-byte message, was overwritten (0x%02x)", ctx, i,
			     from, b[i]);
			return 0;
		}
	return 1;
}

static int check_status(const MPI_Status *st, int src, int tag, size_t n, const char *ctx)
{
	int count;
	M(MPI_Get_count(st, MPI_BYTE, &count));
	if (st->MPI_SOURCE != src) {
		fail("%s: MPI_SOURCE is %d, expected %d", ctx, st->MPI_SOURCE, src);
		return 0;
	}
	if (st->MPI_TAG != tag) {
		fail("%s: MPI_TAG is %d, expected %d", ctx, st->MPI_TAG, tag);
		return 0;
	}
	if (count == MPI_UNDEFINED || (size_t)count != n) {
		fail("%s: MPI_Get_count is %d, expected %zu", ctx, count, n);
		return 0;
	}
	return 1;
}

/* A received message: status, n bytes of pattern, and nothing written in
 * [n, cap) of the cap-byte receive buffer. */
static int check_msg(const MPI_Status *st, const void *buf, size_t cap, int src, int tag, size_t n,
		     uint32_t seed, const char *ctx)
{
	return check_status(st, src, tag, n, ctx) && check_data(buf, n, seed, ctx) &&
	       check_guard(buf, n, cap, ctx);
}

/* ------------------------------------------------------------------ */
/* 1, 2: ping-pong                                                      */

static const size_t sizes[] = {0,       1,       8,        64,      1 * KiB, 4 * KiB,
			       8 * KiB, 64 * KiB, 1 * MiB, 4 * MiB, 16 * MiB};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static size_t largest_size(void)
{
	size_t m = 0;
	for (size_t i = 0; i < NSIZES; i++)
		if (sizes[i] <= max_size)
			m = sizes[i];
	return m;
}

/* Round trips per size: few for the big ones (slow emulated networks). */
static int pp_reps(size_t n) { return n <= 8 * KiB ? 10 : n <= 64 * KiB ? 4 : 1; }

static void t_pingpong(void)
{
	size_t big = largest_size();
	uint8_t *sbuf = xmalloc(big + 8), *rbuf = xmalloc(big + 8 + GUARD);
	char ctx[160];
	MPI_Status st;

	for (int p = 1; p < nranks; p++) {
		if (rank != 0 && rank != p)
			continue;
		for (size_t si = 0; si < NSIZES && sizes[si] <= max_size; si++) {
			size_t n = sizes[si];
			for (int it = 0; it < pp_reps(n); it++) {
				int tag = 100 + (int)si * 16 + it;
				/* vary the alignment of both buffers */
				uint8_t *s = sbuf + ((it + p) & 1) * 3;
				uint8_t *r = rbuf + ((it + (int)si) & 1) * 5;
				size_t cap = n + GUARD;
				if (rank == 0) {
					phase = "pingpong: sending the ping";
					fill(s, n, seed_of(1, 0, p, n, it));
					M(MPI_Send(s, (int)n, MPI_BYTE, p, tag, MPI_COMM_WORLD));
					bytes_net += n;
					prep_recv(r, cap);
					phase = "pingpong: receiving the pong";
					M(MPI_Recv(r, (int)cap, MPI_BYTE, p, tag, MPI_COMM_WORLD, &st));
					snprintf(ctx, sizeof ctx, "pong from rank %d, %zu bytes, iteration %d",
						 p, n, it);
					check_msg(&st, r, cap, p, tag, n, seed_of(1, p, 0, n, it), ctx);
				} else {
					prep_recv(r, cap);
					phase = "pingpong: receiving the ping";
					M(MPI_Recv(r, (int)cap, MPI_BYTE, 0, tag, MPI_COMM_WORLD, &st));
					snprintf(ctx, sizeof ctx, "ping from rank 0, %zu bytes, iteration %d",
						 n, it);
					check_msg(&st, r, cap, 0, tag, n, seed_of(1, 0, p, n, it), ctx);
					phase = "pingpong: sending the pong";
					fill(s, n, seed_of(1, p, 0, n, it));
					M(MPI_Send(s, (int)n, MPI_BYTE, 0, tag, MPI_COMM_WORLD));
					bytes_net += n;
				}
			}
		}
	}
	free(sbuf);
	free(rbuf);
}

/* Non-blocking: per size, k messages of that size to each peer at once,
 * between two small ones, each with its own tag; receives are posted in
 * the reverse order. Rank 0 pre-posts the pongs' receives; peers post the
 * pings' receives when they get there (the pings may be unexpected).
 * Sizes above 4 MiB go to the last rank only (every rank gets them in
 * pingpong, and 4 MiB already has every peer at once): that keeps the
 * default 4-rank run well under 300 MB for the VM's emulated network. */
static int nb_window(size_t n) { return n <= 64 * KiB ? 4 : n <= 1 * MiB ? 2 : 1; }
static size_t nb_msg_size(size_t n, int j, int nm) { return j == 0 ? 17 : j == nm - 1 ? 3 : n; }

static void nb_check(const MPI_Status *st, uint8_t *buf, int src, int dst, size_t n, int si, int j,
		     int nm)
{
	char ctx[160];
	size_t len = nb_msg_size(n, j, nm);
	snprintf(ctx, sizeof ctx, "%s from rank %d, message %d of %d (%zu bytes) of size class %zu",
		 src == 0 ? "ping" : "pong", src, j, nm, len, n);
	check_msg(st, buf, len + GUARD, src, 1000 + si * 8 + j, len, seed_of(2, src, dst, n, j), ctx);
}

static void t_nonblocking(void)
{
	for (size_t si = 0; si < NSIZES && sizes[si] <= max_size; si++) {
		size_t n = sizes[si];
		int k = nb_window(n), nm = k + 2;
		size_t per_peer = 2 * (size_t)k * (n + GUARD) + 1;
		int batch = (int)min_sz((size_t)(nranks - 1), (256 * MiB) / per_peer);
		if (batch < 1)
			batch = 1;
		for (int first = n > 4 * MiB ? nranks - 1 : 1; first < nranks; first += batch) {
			int last = first + batch - 1 < nranks - 1 ? first + batch - 1 : nranks - 1;
			int np = last - first + 1;
			if (rank != 0 && (rank < first || rank > last))
				continue;
			int npeers = rank == 0 ? np : 1, nmsg = npeers * nm;
			uint8_t **sb = xmalloc(sizeof *sb * (size_t)nmsg);
			uint8_t **rb = xmalloc(sizeof *rb * (size_t)nmsg);
			MPI_Request *rq = xmalloc(sizeof *rq * 2 * (size_t)nmsg);
			MPI_Status *st = xmalloc(sizeof *st * 2 * (size_t)nmsg);
			for (int x = 0; x < npeers; x++) {
				int p = rank == 0 ? first + x : 0;
				for (int j = nm - 1; j >= 0; j--) {
					size_t len = nb_msg_size(n, j, nm);
					int i = x * nm + j;
					rb[i] = xmalloc(len + GUARD);
					prep_recv(rb[i], len + GUARD);
					M(MPI_Irecv(rb[i], (int)(len + GUARD), MPI_BYTE, p,
						    1000 + (int)si * 8 + j, MPI_COMM_WORLD, &rq[i]));
				}
			}
			if (rank != 0) {
				phase = "nonblocking: receiving the pings";
				M(MPI_Waitall(nmsg, rq, st));
				for (int j = 0; j < nm; j++)
					nb_check(&st[j], rb[j], 0, rank, n, (int)si, j, nm);
			}
			for (int x = 0; x < npeers; x++) {
				int p = rank == 0 ? first + x : 0;
				for (int j = 0; j < nm; j++) {
					size_t len = nb_msg_size(n, j, nm);
					int i = x * nm + j;
					sb[i] = xmalloc(len);
					fill(sb[i], len, seed_of(2, rank, p, n, j));
					M(MPI_Isend(sb[i], (int)len, MPI_BYTE, p, 1000 + (int)si * 8 + j,
						    MPI_COMM_WORLD, &rq[nmsg + i]));
					bytes_net += len;
				}
			}
			if (rank == 0) {
				phase = "nonblocking: pings out, pongs in";
				M(MPI_Waitall(2 * nmsg, rq, st));
				for (int x = 0; x < npeers; x++)
					for (int j = 0; j < nm; j++)
						nb_check(&st[x * nm + j], rb[x * nm + j], first + x, 0, n,
							 (int)si, j, nm);
			} else {
				phase = "nonblocking: sending the pongs";
				M(MPI_Waitall(nmsg, rq + nmsg, st + nmsg));
			}
			for (int i = 0; i < nmsg; i++) {
				free(sb[i]);
				free(rb[i]);
			}
			free(sb);
			free(rb);
			free(rq);
			free(st);
		}
	}
}

/* ------------------------------------------------------------------ */
/* 3: wildcard receives                                                 */

#define AS_M 4
static size_t as_size(int j)
{
	static const size_t s[AS_M] = {0, 17, 4096, 70000};
	return min_sz(s[j], max_size);
}

static void t_anysource(void)
{
	size_t cap = as_size(AS_M - 1) + GUARD + 128;
	uint8_t *buf = xmalloc(cap);
	char ctx[160];
	MPI_Status st;

	/* A: every rank sends AS_M messages, tags 3000 + r*AS_M + j; rank 0
	 * receives them all with MPI_ANY_SOURCE + MPI_ANY_TAG. Messages from
	 * one source must come in the order sent (non-overtaking). */
	if (rank == 0) {
		int *next = xmalloc(sizeof *next * (size_t)nranks);
		memset(next, 0, sizeof *next * (size_t)nranks);
		phase = "anysource: wildcard receives";
		for (int m = 0; m < (nranks - 1) * AS_M; m++) {
			prep_recv(buf, cap);
			M(MPI_Recv(buf, (int)cap, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD,
				   &st));
			int src = st.MPI_SOURCE, tag = st.MPI_TAG;
			if (src < 1 || src >= nranks) {
				fail("wildcard receive %d: MPI_SOURCE is %d", m, src);
				continue;
			}
			if (tag < 3000 || (tag - 3000) / AS_M != src) {
				fail("wildcard receive %d: MPI_TAG %d does not belong to source %d", m, tag,
				     src);
				continue;
			}
			int j = (tag - 3000) % AS_M;
			if (j != next[src])
				fail("wildcard receive %d: message %d from rank %d came before its message %d "
				     "(non-overtaking)",
				     m, j, src, next[src]);
			next[src] = j + 1;
			snprintf(ctx, sizeof ctx, "wildcard receive of message %d from rank %d", j, src);
			check_msg(&st, buf, cap, src, tag, as_size(j), seed_of(3, src, 0, as_size(j), j),
				  ctx);
		}
		free(next);
	} else {
		phase = "anysource: sending";
		for (int j = 0; j < AS_M; j++) {
			fill(buf, as_size(j), seed_of(3, rank, 0, as_size(j), j));
			M(MPI_Send(buf, (int)as_size(j), MPI_BYTE, 0, 3000 + rank * AS_M + j,
				   MPI_COMM_WORLD));
			bytes_net += as_size(j);
		}
	}
	M(MPI_Barrier(MPI_COMM_WORLD));

	/* B: one tag for all, MPI_ANY_SOURCE with that tag. */
	if (rank == 0) {
		char *seen = xmalloc((size_t)nranks);
		memset(seen, 0, (size_t)nranks);
		phase = "anysource: MPI_ANY_SOURCE with a tag";
		for (int m = 0; m < nranks - 1; m++) {
			prep_recv(buf, cap);
			M(MPI_Recv(buf, (int)cap, MPI_BYTE, MPI_ANY_SOURCE, 2999, MPI_COMM_WORLD, &st));
			int src = st.MPI_SOURCE;
			if (src < 1 || src >= nranks || seen[src]) {
				fail("MPI_ANY_SOURCE receive %d: MPI_SOURCE %d is out of range or seen twice",
				     m, src);
				continue;
			}
			seen[src] = 1;
			size_t n = min_sz(100 + (size_t)src, max_size);
			snprintf(ctx, sizeof ctx, "MPI_ANY_SOURCE receive (tag 2999) from rank %d", src);
			check_msg(&st, buf, cap, src, 2999, n, seed_of(3, src, 0, n, 100), ctx);
		}
		free(seen);
	} else {
		size_t n = min_sz(100 + (size_t)rank, max_size);
		fill(buf, n, seed_of(3, rank, 0, n, 100));
		M(MPI_Send(buf, (int)n, MPI_BYTE, 0, 2999, MPI_COMM_WORLD));
		bytes_net += n;
	}
	M(MPI_Barrier(MPI_COMM_WORLD));

	/* C: a source with MPI_ANY_TAG; two tags from it, in the order sent. */
	if (rank == 0) {
		phase = "anysource: MPI_ANY_TAG from a source";
		for (int src = nranks - 1; src >= 1; src--)
			for (int j = 0; j < 2; j++) {
				size_t n = min_sz(j ? 65 : 33, max_size);
				prep_recv(buf, cap);
				M(MPI_Recv(buf, (int)cap, MPI_BYTE, src, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
				snprintf(ctx, sizeof ctx, "MPI_ANY_TAG receive %d from rank %d", j, src);
				check_msg(&st, buf, cap, src, 2998 - j, n, seed_of(3, src, 0, n, 200 + j),
					  ctx);
			}
	} else {
		for (int j = 0; j < 2; j++) {
			size_t n = min_sz(j ? 65 : 33, max_size);
			fill(buf, n, seed_of(3, rank, 0, n, 200 + j));
			M(MPI_Send(buf, (int)n, MPI_BYTE, 0, 2998 - j, MPI_COMM_WORLD));
			bytes_net += n;
		}
	}
	free(buf);
}

/* ------------------------------------------------------------------ */
/* 4: many small unexpected messages                                    */

#define UX_N 1000   /* messages per sender */
#define UX_SAME 4   /* consecutive messages that share a tag */
#define UX_MAX 256  /* largest message */
#define UX_CAP (UX_MAX + GUARD)

static size_t ux_size(int r, int i) { return min_sz((size_t)((i * 37 + r * 11) % (UX_MAX + 1)), max_size); }
static int ux_tag(int i) { return 4000 + i / UX_SAME; }

static void t_unexpected(void)
{
	char ctx[160];
	if (rank != 0) {
		size_t total = 0, *off = xmalloc(sizeof *off * UX_N);
		for (int i = 0; i < UX_N; i++) {
			off[i] = total;
			total += ux_size(rank, i);
		}
		uint8_t *buf = xmalloc(total);
		MPI_Request *rq = xmalloc(sizeof *rq * UX_N);
		phase = "unexpected: sending";
		for (int i = 0; i < UX_N; i++) {
			size_t n = ux_size(rank, i);
			fill(buf + off[i], n, seed_of(4, rank, 0, n, i));
			M(MPI_Isend(buf + off[i], (int)n, MPI_BYTE, 0, ux_tag(i), MPI_COMM_WORLD, &rq[i]));
			bytes_net += n;
		}
		phase = "unexpected: barrier after the sends";
		M(MPI_Barrier(MPI_COMM_WORLD));
		phase = "unexpected: completing the sends";
		M(MPI_Waitall(UX_N, rq, MPI_STATUSES_IGNORE));
		free(rq);
		free(buf);
		free(off);
		return;
	}
	/* Rank 0 posts nothing before every sender has started all its sends,
	 * then posts receives in decreasing tag order (the messages of one
	 * tag in order: the k-th receive of a tag must get the k-th message). */
	size_t nmsg = (size_t)(nranks - 1) * UX_N;
	uint8_t *buf = xmalloc(nmsg * UX_CAP);
	MPI_Request *rq = xmalloc(sizeof *rq * nmsg);
	MPI_Status *st = xmalloc(sizeof *st * nmsg);
	phase = "unexpected: barrier before the receives";
	M(MPI_Barrier(MPI_COMM_WORLD));
	prep_recv(buf, nmsg * UX_CAP);
	for (int r = 1; r < nranks; r++)
		for (int g = (UX_N - 1) / UX_SAME; g >= 0; g--)
			for (int q = 0; q < UX_SAME; q++) {
				int i = g * UX_SAME + q;
				if (i >= UX_N)
					continue;
				size_t x = (size_t)(r - 1) * UX_N + (size_t)i;
				M(MPI_Irecv(buf + x * UX_CAP, UX_CAP, MPI_BYTE, r, ux_tag(i), MPI_COMM_WORLD,
					    &rq[x]));
			}
	phase = "unexpected: receiving";
	M(MPI_Waitall((int)nmsg, rq, st));
	for (int r = 1; r < nranks; r++)
		for (int i = 0; i < UX_N; i++) {
			size_t x = (size_t)(r - 1) * UX_N + (size_t)i, n = ux_size(r, i);
			snprintf(ctx, sizeof ctx, "message %d of %d from rank %d (tag %d, %zu bytes)", i, UX_N,
				 r, ux_tag(i), n);
			check_msg(&st[x], buf + x * UX_CAP, UX_CAP, r, ux_tag(i), n, seed_of(4, r, 0, n, i),
				  ctx);
		}
	free(st);
	free(rq);
	free(buf);
}

/* ------------------------------------------------------------------ */
/* 5: probes                                                            */

static size_t pr_iprobe_size(int r) { return min_sz(1000 + (size_t)r, max_size); }
static size_t pr_mprobe_size(int r, int j) { return min_sz(j ? 200000 + (size_t)r : 5 + (size_t)r, max_size); }
static size_t pr_probe_size(int r) { return min_sz(65536 * (size_t)(1 + r % 3) + (size_t)r, max_size); }

static void t_probe(void)
{
	char ctx[160];
	MPI_Status st, st2;
	int flag, count;

	/* A: MPI_Iprobe(ANY, ANY) loop; probing again finds the same message;
	 * then MPI_Recv from the probed source and tag. */
	if (rank == 0) {
		size_t cap = pr_iprobe_size(nranks) + GUARD;
		uint8_t *buf = xmalloc(cap);
		char *seen = xmalloc((size_t)nranks);
		memset(seen, 0, (size_t)nranks);
		phase = "probe: MPI_Iprobe loop";
		for (int m = 0; m < nranks - 1; m++) {
			do
				M(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
			while (!flag);
			int src = st.MPI_SOURCE;
			if (src < 1 || src >= nranks || seen[src]) {
				fail("MPI_Iprobe %d: MPI_SOURCE %d out of range or seen twice", m, src);
				break;
			}
			seen[src] = 1;
			size_t n = pr_iprobe_size(src);
			snprintf(ctx, sizeof ctx, "MPI_Iprobe of the message from rank %d", src);
			check_status(&st, src, 5000 + src, n, ctx);
			M(MPI_Iprobe(src, 5000 + src, MPI_COMM_WORLD, &flag, &st2));
			if (!flag)
				fail("second MPI_Iprobe of rank %d's message found nothing", src);
			else
				check_status(&st2, src, 5000 + src, n, "second MPI_Iprobe of the same message");
			prep_recv(buf, cap);
			M(MPI_Recv(buf, (int)cap, MPI_BYTE, src, st.MPI_TAG, MPI_COMM_WORLD, &st2));
			snprintf(ctx, sizeof ctx, "receive after MPI_Iprobe from rank %d", src);
			check_msg(&st2, buf, cap, src, 5000 + src, n, seed_of(5, src, 0, n, 0), ctx);
		}
		free(seen);
		free(buf);
	} else {
		size_t n = pr_iprobe_size(rank);
		uint8_t *buf = xmalloc(n);
		fill(buf, n, seed_of(5, rank, 0, n, 0));
		phase = "probe: sending for MPI_Iprobe";
		M(MPI_Send(buf, (int)n, MPI_BYTE, 0, 5000 + rank, MPI_COMM_WORLD));
		bytes_net += n;
		free(buf);
	}
	M(MPI_Barrier(MPI_COMM_WORLD));

	/* B: MPI_Improbe(ANY, ANY) + MPI_Mrecv into a buffer of the probed
	 * size; two messages per source with one tag, in the order sent. */
	if (rank == 0) {
		int *next = xmalloc(sizeof *next * (size_t)nranks);
		memset(next, 0, sizeof *next * (size_t)nranks);
		phase = "probe: MPI_Improbe + MPI_Mrecv";
		for (int m = 0; m < 2 * (nranks - 1); m++) {
			MPI_Message msg;
			do
				M(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &msg, &st));
			while (!flag);
			int src = st.MPI_SOURCE;
			M(MPI_Get_count(&st, MPI_BYTE, &count));
			if (src < 1 || src >= nranks || next[src] > 1 || count < 0) {
				fail("MPI_Improbe %d: MPI_SOURCE %d, count %d: unexpected", m, src, count);
				break;
			}
			int j = next[src]++;
			size_t n = pr_mprobe_size(src, j);
			snprintf(ctx, sizeof ctx, "MPI_Improbe of message %d from rank %d", j, src);
			check_status(&st, src, 5100, n, ctx);
			size_t cap = (size_t)count + GUARD;
			uint8_t *buf = xmalloc(cap);
			prep_recv(buf, cap);
			M(MPI_Mrecv(buf, (int)cap, MPI_BYTE, &msg, &st2));
			if (msg != MPI_MESSAGE_NULL)
				fail("MPI_Mrecv did not set the message handle to MPI_MESSAGE_NULL");
			snprintf(ctx, sizeof ctx, "MPI_Mrecv of message %d from rank %d", j, src);
			check_msg(&st2, buf, cap, src, 5100, n, seed_of(5, src, 0, n, 1 + j), ctx);
			free(buf);
		}
		free(next);
	} else {
		phase = "probe: sending for MPI_Improbe";
		for (int j = 0; j < 2; j++) {
			size_t n = pr_mprobe_size(rank, j);
			uint8_t *buf = xmalloc(n);
			fill(buf, n, seed_of(5, rank, 0, n, 1 + j));
			M(MPI_Send(buf, (int)n, MPI_BYTE, 0, 5100, MPI_COMM_WORLD));
			bytes_net += n;
			free(buf);
		}
	}
	M(MPI_Barrier(MPI_COMM_WORLD));

	/* C: blocking MPI_Probe(ANY, ANY), then MPI_Recv of what it found. */
	if (rank == 0) {
		phase = "probe: MPI_Probe";
		for (int m = 0; m < nranks - 1; m++) {
			M(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
			int src = st.MPI_SOURCE;
			M(MPI_Get_count(&st, MPI_BYTE, &count));
			if (src < 1 || src >= nranks || count < 0) {
				fail("MPI_Probe %d: MPI_SOURCE %d, count %d: unexpected", m, src, count);
				break;
			}
			size_t n = pr_probe_size(src);
			snprintf(ctx, sizeof ctx, "MPI_Probe of the message from rank %d", src);
			check_status(&st, src, 5200 + src % 7, n, ctx);
			size_t cap = (size_t)count + GUARD;
			uint8_t *buf = xmalloc(cap);
			prep_recv(buf, cap);
			M(MPI_Recv(buf, (int)cap, MPI_BYTE, src, st.MPI_TAG, MPI_COMM_WORLD, &st2));
			snprintf(ctx, sizeof ctx, "receive after MPI_Probe from rank %d", src);
			check_msg(&st2, buf, cap, src, 5200 + src % 7, n, seed_of(5, src, 0, n, 3), ctx);
			free(buf);
		}
	} else {
		size_t n = pr_probe_size(rank);
		uint8_t *buf = xmalloc(n);
		fill(buf, n, seed_of(5, rank, 0, n, 3));
		phase = "probe: sending for MPI_Probe";
		M(MPI_Send(buf, (int)n, MPI_BYTE, 0, 5200 + rank % 7, MPI_COMM_WORLD));
		bytes_net += n;
		free(buf);
	}
}

/* ------------------------------------------------------------------ */
/* 6: cancel                                                            */

static void cancel_one(void *buf, size_t cap, int src, int tag, const char *what)
{
	MPI_Request rq;
	MPI_Status st;
	int flag = 0;
	M(MPI_Irecv(buf, (int)cap, MPI_BYTE, src, tag, MPI_COMM_WORLD, &rq));
	M(MPI_Cancel(&rq));
	M(MPI_Wait(&rq, &st));
	M(MPI_Test_cancelled(&st, &flag));
	if (!flag)
		fail("%s: MPI_Test_cancelled says false for a receive that cannot match", what);
	if (rq != MPI_REQUEST_NULL)
		fail("%s: MPI_Wait left the cancelled request active", what);
}

static void t_cancel(void)
{
	int left = (rank + nranks - 1) % nranks, right = (rank + 1) % nranks;
	size_t ns[2] = {min_sz(64, max_size), min_sz(256 * KiB, max_size)};
	char ctx[160];

	for (int t = 0; t < 2; t++) {
		size_t n = ns[t], cap = n + GUARD;
		int tag = 6000 + t;
		uint8_t *a = xmalloc(cap), *b = xmalloc(cap), *c = xmalloc(cap), *d = xmalloc(cap);
		uint8_t *s = xmalloc(n);
		MPI_Request rq;
		MPI_Status st;
		prep_recv(a, cap);
		prep_recv(b, cap);
		prep_recv(c, cap);
		prep_recv(d, cap);
		phase = "cancel: cancelling receives";
		cancel_one(a, cap, MPI_ANY_SOURCE, 6900, "receive (MPI_ANY_SOURCE, unused tag)");
		cancel_one(b, cap, left, tag, "receive (left neighbour, the tag sent later)");
		cancel_one(c, cap, MPI_ANY_SOURCE, MPI_ANY_TAG, "receive (MPI_ANY_SOURCE, MPI_ANY_TAG)");
		/* The same source and tag again, not cancelled: gets the message. */
		M(MPI_Irecv(d, (int)cap, MPI_BYTE, left, tag, MPI_COMM_WORLD, &rq));
		phase = "cancel: barrier";
		M(MPI_Barrier(MPI_COMM_WORLD));
		fill(s, n, seed_of(6, rank, right, n, t));
		phase = "cancel: sending to the right neighbour";
		M(MPI_Send(s, (int)n, MPI_BYTE, right, tag, MPI_COMM_WORLD));
		bytes_net += n;
		phase = "cancel: receive after the cancelled ones";
		M(MPI_Wait(&rq, &st));
		snprintf(ctx, sizeof ctx, "receive posted after cancelled ones, %zu bytes from rank %d", n,
			 left);
		check_msg(&st, d, cap, left, tag, n, seed_of(6, left, rank, n, t), ctx);
		check_guard(a, 0, cap, "buffer of a cancelled receive (MPI_ANY_SOURCE, unused tag)");
		check_guard(b, 0, cap, "buffer of a cancelled receive (same source and tag)");
		check_guard(c, 0, cap, "buffer of a cancelled receive (MPI_ANY_SOURCE, MPI_ANY_TAG)");
		free(a);
		free(b);
		free(c);
		free(d);
		free(s);
	}
}

/* ------------------------------------------------------------------ */
/* 7: collectives                                                       */

#define AR_N 8192
static int a2av_count(int s, int d) { return ((s * 3 + d * 5) % 7) * 513; }

static void t_collectives(void)
{
	int64_t R = nranks;
	char ctx[160];

	/* MPI_Allreduce sums, against closed forms (exact in double). */
	phase = "collectives: MPI_Allreduce";
	{
		int64_t *iv = xmalloc(sizeof *iv * AR_N), *io = xmalloc(sizeof *io * AR_N);
		double *dv = xmalloc(sizeof *dv * AR_N);
		for (int i = 0; i < AR_N; i++) {
			iv[i] = (int64_t)rank * 1000003 + (int64_t)i * (rank + 1) - 5000;
			dv[i] = (double)(rank + 1) * ((i % 1000) * 0.25 - 100.0);
		}
		M(MPI_Allreduce(iv, io, AR_N, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
		M(MPI_Allreduce(MPI_IN_PLACE, dv, AR_N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
		bytes_net += 2 * (uint64_t)AR_N * 16 * (uint64_t)(R - 1) / (uint64_t)R;
		for (int i = 0; i < AR_N; i++) {
			int64_t ie = 1000003 * R * (R - 1) / 2 + (int64_t)i * R * (R + 1) / 2 - 5000 * R;
			double de = (double)(R * (R + 1) / 2) * ((i % 1000) * 0.25 - 100.0);
			if (io[i] != ie) {
				fail("MPI_Allreduce int64 sum: element %d is %" PRId64 ", expected %" PRId64, i,
				     io[i], ie);
				break;
			}
			if (dv[i] != de) {
				fail("MPI_Allreduce double sum (in place): element %d is %.17g, expected %.17g",
				     i, dv[i], de);
				break;
			}
		}
		free(iv);
		free(io);
		free(dv);
	}

	/* MPI_Alltoall: block d from rank r is pattern (r, d). */
	phase = "collectives: MPI_Alltoall";
	{
		size_t blk = min_sz(1000, max_size);
		uint8_t *sb = xmalloc(blk * (size_t)nranks), *rb = xmalloc(blk * (size_t)nranks + GUARD);
		for (int d = 0; d < nranks; d++)
			fill(sb + (size_t)d * blk, blk, seed_of(7, rank, d, blk, 0));
		prep_recv(rb, blk * (size_t)nranks + GUARD);
		M(MPI_Alltoall(sb, (int)blk, MPI_BYTE, rb, (int)blk, MPI_BYTE, MPI_COMM_WORLD));
		bytes_net += blk * (size_t)(nranks - 1);
		for (int s = 0; s < nranks; s++) {
			snprintf(ctx, sizeof ctx, "MPI_Alltoall block from rank %d", s);
			if (!check_data(rb + (size_t)s * blk, blk, seed_of(7, s, rank, blk, 0), ctx))
				break;
		}
		check_guard(rb, blk * (size_t)nranks, blk * (size_t)nranks + GUARD,
			    "MPI_Alltoall receive buffer");
		free(sb);
		free(rb);
	}

	/* MPI_Alltoallv: varied counts (some 0), gaps between blocks, blocks
	 * received in the reverse order of their sources. */
	phase = "collectives: MPI_Alltoallv";
	{
		int *sc = xmalloc(sizeof(int) * (size_t)nranks), *sd = xmalloc(sizeof(int) * (size_t)nranks);
		int *rc = xmalloc(sizeof(int) * (size_t)nranks), *rd = xmalloc(sizeof(int) * (size_t)nranks);
		int so = 0, ro = 0;
		for (int d = 0; d < nranks; d++) {
			sc[d] = a2av_count(rank, d);
			sd[d] = so;
			so += sc[d] + 8;
		}
		for (int s = nranks - 1; s >= 0; s--) {
			rc[s] = a2av_count(s, rank);
			rd[s] = ro;
			ro += rc[s] + 8;
		}
		uint8_t *sb = xmalloc((size_t)so), *rb = xmalloc((size_t)ro);
		for (int d = 0; d < nranks; d++) {
			fill(sb + sd[d], (size_t)sc[d], seed_of(7, rank, d, (size_t)sc[d], 1));
			if (d != rank)
				bytes_net += (uint64_t)sc[d];
		}
		prep_recv(rb, (size_t)ro);
		M(MPI_Alltoallv(sb, sc, sd, MPI_BYTE, rb, rc, rd, MPI_BYTE, MPI_COMM_WORLD));
		for (int s = 0; s < nranks; s++) {
			snprintf(ctx, sizeof ctx, "MPI_Alltoallv block of %d bytes from rank %d", rc[s], s);
			if (!check_data(rb + rd[s], (size_t)rc[s], seed_of(7, s, rank, (size_t)rc[s], 1),
					ctx) ||
			    !check_guard(rb + rd[s], (size_t)rc[s], (size_t)rc[s] + 8, ctx))
				break;
		}
		free(sb);
		free(rb);
		free(sc);
		free(sd);
		free(rc);
		free(rd);
	}

	/* MPI_Bcast: 1 MiB from rank 0, 1000 bytes from the last rank. */
	phase = "collectives: MPI_Bcast";
	for (int t = 0; t < 2; t++) {
		size_t n = min_sz(t ? 1000 : 1 * MiB, max_size);
		int root = t ? nranks - 1 : 0;
		uint8_t *b = xmalloc(n + GUARD);
		prep_recv(b, n + GUARD);
		if (rank == root) {
			fill(b, n, seed_of(7, root, -1, n, 2 + t));
			bytes_net += n * (size_t)(nranks - 1);
		}
		M(MPI_Bcast(b, (int)n, MPI_BYTE, root, MPI_COMM_WORLD));
		snprintf(ctx, sizeof ctx, "MPI_Bcast of %zu bytes from rank %d", n, root);
		if (check_data(b, n, seed_of(7, root, -1, n, 2 + t), ctx))
			check_guard(b, n, n + GUARD, ctx);
		free(b);
	}
}

/* ------------------------------------------------------------------ */
/* 8: a rank to itself                                                  */

static void t_self(void)
{
	static const size_t ss[] = {0, 1, 64, 4 * KiB, 64 * KiB, 1 * MiB};
	char ctx[160];
	for (size_t si = 0; si < sizeof ss / sizeof ss[0] && ss[si] <= max_size; si++) {
		size_t n = ss[si], cap = n + GUARD;
		int tag = 8000 + (int)si;
		uint8_t *s[2] = {xmalloc(n), xmalloc(n)}, *r = xmalloc(cap);
		MPI_Request rq[2];
		MPI_Status st;
		phase = "self: MPI_Isend to self + MPI_Recv";
		/* Two messages with one tag: received in the order sent. */
		for (int j = 0; j < 2; j++) {
			fill(s[j], n, seed_of(8, rank, rank, n, j));
			M(MPI_Isend(s[j], (int)n, MPI_BYTE, rank, tag, MPI_COMM_WORLD, &rq[j]));
			bytes_self += n;
		}
		for (int j = 0; j < 2; j++) {
			prep_recv(r, cap);
			M(MPI_Recv(r, (int)cap, MPI_BYTE, rank, tag, MPI_COMM_WORLD, &st));
			snprintf(ctx, sizeof ctx, "message %d to self, %zu bytes", j, n);
			check_msg(&st, r, cap, rank, tag, n, seed_of(8, rank, rank, n, j), ctx);
		}
		M(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
		free(s[0]);
		free(s[1]);
		free(r);
	}
}

/* ------------------------------------------------------------------ */
/* 9: freed and reallocated buffers (registration-cache hazard)         */

#define RU_ROUNDS 2

static void t_reuse(void)
{
	size_t n = min_sz(8 * MiB, max_size), cap = n + GUARD;
	const int snd = 1, rcv = 0;
	uintptr_t first = 0;
	int reused = 0, total = 0;
	char ctx[160];
#ifdef M_MMAP_THRESHOLD
	/* Buffers this big come from mmap and go back with munmap: the next
	 * malloc gets new pages, most likely at the same address. (glibc would
	 * otherwise raise its threshold after the 16 MiB buffers of tests 1-2.) */
	mallopt(M_MMAP_THRESHOLD, (int)(1 * MiB));
#endif
	for (int round = 0; round < RU_ROUNDS; round++) {
		int tag = 9000 + round;
		MPI_Status st;
		if (rank == snd) {
			uint8_t *b = xmalloc(n);
			fill(b, n, seed_of(9, snd, rcv, n, round));
			phase = "reuse: sending";
			M(MPI_Send(b, (int)n, MPI_BYTE, rcv, tag, MPI_COMM_WORLD));
			bytes_net += n;
			if (round == 0)
				first = (uintptr_t)b;
			else
				total++, reused += (uintptr_t)b == first;
			free(b);
		} else if (rank == rcv) {
			uint8_t *b = xmalloc(cap);
			prep_recv(b, cap);
			phase = "reuse: receiving";
			M(MPI_Recv(b, (int)cap, MPI_BYTE, snd, tag, MPI_COMM_WORLD, &st));
			snprintf(ctx, sizeof ctx, "round %d of %d, %zu bytes from rank %d%s", round + 1,
				 RU_ROUNDS, n, snd,
				 round ? " (buffers freed and allocated again on both sides)" : "");
			check_msg(&st, b, cap, snd, tag, n, seed_of(9, snd, rcv, n, round), ctx);
			if (round == 0)
				first = (uintptr_t)b;
			else
				total++, reused += (uintptr_t)b == first;
			free(b);
		}
	}
	int v[4] = {rank == snd ? reused : 0, rank == snd ? total : 0, rank == rcv ? reused : 0,
		    rank == rcv ? total : 0},
	    sum[4];
	M(MPI_Reduce(v, sum, 4, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
	if (rank == 0)
		printf("# reuse: %zu-byte buffers at the same address again: sender %d of %d, receiver %d "
		       "of %d\n",
		       n, sum[0], sum[1], sum[2], sum[3]);
}

/* ------------------------------------------------------------------ */
/* Driver                                                               */

static const struct {
	const char *name;
	void (*fn)(void);
} tests[] = {
	{"pingpong", t_pingpong}, {"nonblocking", t_nonblocking}, {"anysource", t_anysource},
	{"unexpected", t_unexpected}, {"probe", t_probe}, {"cancel", t_cancel},
	{"collectives", t_collectives}, {"self", t_self}, {"reuse", t_reuse},
};
#define NTESTS ((int)(sizeof tests / sizeof tests[0]))

static void begin_test(int num, const char *name)
{
	cur_num = num;
	cur_name = name;
	err[0] = 0;
	phase = "start";
	snprintf(tmo_prefix, sizeof tmo_prefix, "not ok %d - %s: rank %d: timeout after %u s in ", num,
		 name, rank, timeout_s);
	if (timeout_s)
		alarm(rank == 0 ? timeout_s : timeout_s + 10); /* rank 0 says it first */
}

static void end_test(double t0, uint64_t b0)
{
	int flag, mine, first, f, nfail;
	MPI_Status st;
	uint64_t db = bytes_net - b0, tb = 0;

	phase = "barrier at the end of the test";
	M(MPI_Barrier(MPI_COMM_WORLD));
	/* Every message of the test has been received: nothing may be left. */
	M(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
	if (flag) {
		int c = -1;
		MPI_Get_count(&st, MPI_BYTE, &c);
		fail("an extra message (from rank %d, tag %d, %d bytes) is left after the test",
		     st.MPI_SOURCE, st.MPI_TAG, c);
	}
	phase = "agreeing on the result";
	mine = err[0] ? rank : nranks;
	f = err[0] != 0;
	M(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
	M(MPI_Allreduce(&f, &nfail, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
	M(MPI_Reduce(&db, &tb, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD));
	if (first < nranks) {
		M(MPI_Bcast(err, sizeof err, MPI_CHAR, first, MPI_COMM_WORLD));
		if (rank == 0) {
			if (nfail > 1)
				printf("not ok %d - %s: %s (and %d more ranks failed)\n", cur_num, cur_name, err,
				       nfail - 1);
			else
				printf("not ok %d - %s: %s\n", cur_num, cur_name, err);
			fflush(stdout);
		}
		MPI_Barrier(MPI_COMM_WORLD);
		if (rank != 0)
			sleep(30); /* one MPI_Abort, rank 0's, ends the job */
		MPI_Abort(MPI_COMM_WORLD, 1);
		exit(1);
	}
	alarm(0);
	if (rank == 0) {
		printf("ok %d - %s\n", cur_num, cur_name);
		if (verbose)
			printf("# %s: %" PRIu64 " bytes between ranks in %.3f s\n", cur_name, tb,
			       MPI_Wtime() - t0);
		fflush(stdout);
	}
}

static int parse_size(const char *s, size_t *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (end == s || *s == '-')
		return -1;
	switch (*end) {
	case 'k': case 'K': v *= 1024; end++; break;
	case 'm': case 'M': v *= 1024 * 1024; end++; break;
	case 'g': case 'G': v *= 1024 * 1024 * 1024; end++; break;
	}
	if (*end || v > (unsigned long long)(INT32_MAX - 4096))
		return -1;
	*out = (size_t)v;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: vrma_mpi_test [-t name[,name...]] [-s max_size] [-T seconds] [-v]\n"
		   "  -t  tests to run (default all):");
	for (int i = 0; i < NTESTS; i++)
		fprintf(f, " %s", tests[i].name);
	fprintf(f, "\n  -s  largest message of the size sweeps, with k/M/G suffixes (default 16M)\n"
		   "  -T  per-test timeout in seconds, 0 for none (default 300)\n"
		   "  -v  bytes and time of each test\n"
		   "Runs on 2 ranks or more; exits non-zero (MPI_Abort) on the first failed test.\n");
}

/* 0: go on; otherwise the exit status. Every rank parses the same line;
 * rank 0 alone speaks. */
static int parse_args(int argc, char **argv, char *sel)
{
	int c;
	for (int i = 0; i < NTESTS; i++)
		sel[i] = 1;
	opterr = 0;
	while ((c = getopt(argc, argv, "t:s:T:vh")) != -1) {
		switch (c) {
		case 't': {
			char *list = strdup(optarg), *save = NULL;
			memset(sel, 0, NTESTS);
			for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
				int found = 0;
				for (int i = 0; i < NTESTS; i++)
					if (!strcmp(tok, tests[i].name))
						sel[i] = found = 1;
				if (!found) {
					if (rank == 0) {
						fprintf(stderr, "vrma_mpi_test: unknown test '%s'\n", tok);
						usage(stderr);
					}
					free(list);
					return 2;
				}
			}
			free(list);
			break;
		}
		case 's':
			if (parse_size(optarg, &max_size)) {
				if (rank == 0)
					fprintf(stderr, "vrma_mpi_test: bad size for -s: '%s'\n", optarg);
				return 2;
			}
			break;
		case 'T': {
			char *end;
			unsigned long v = strtoul(optarg, &end, 10);
			if (end == optarg || *end || v > 86400) {
				if (rank == 0)
					fprintf(stderr, "vrma_mpi_test: bad timeout for -T: '%s'\n", optarg);
				return 2;
			}
			timeout_s = (unsigned)v;
			break;
		}
		case 'v':
			verbose = 1;
			break;
		case 'h':
			if (rank == 0)
				usage(stdout);
			return 1000;
		default:
			if (rank == 0) {
				fprintf(stderr, "vrma_mpi_test: bad option or missing value: -%c\n", optopt);
				usage(stderr);
			}
			return 2;
		}
	}
	if (optind < argc) {
		if (rank == 0) {
			fprintf(stderr, "vrma_mpi_test: unexpected argument '%s'\n", argv[optind]);
			usage(stderr);
		}
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	char sel[NTESTS];
	int rc, k = 0, n = 0;
	double t_start;
	struct sigaction sa;

	M(MPI_Init(&argc, &argv));
	M(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
	M(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
	M(MPI_Comm_size(MPI_COMM_WORLD, &nranks));

	rc = parse_args(argc, argv, sel);
	if (rc) {
		MPI_Finalize();
		return rc == 1000 ? 0 : rc;
	}
	if (nranks < 2) {
		if (rank == 0)
			fprintf(stderr, "vrma_mpi_test: needs 2 ranks or more (got %d)\n", nranks);
		MPI_Finalize();
		return 2;
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, NULL);

	for (int i = 0; i < NTESTS; i++)
		k += sel[i];
	if (rank == 0) {
		char lib[MPI_MAX_LIBRARY_VERSION_STRING];
		int len = 0;
		MPI_Get_library_version(lib, &len);
		lib[strcspn(lib, ",\n")] = 0;
		printf("1..%d\n# vrma_mpi_test: %d ranks, messages up to %zu bytes, %s\n", k, nranks,
		       max_size, lib);
		fflush(stdout);
	}
	M(MPI_Barrier(MPI_COMM_WORLD));
	t_start = MPI_Wtime();
	for (int i = 0; i < NTESTS; i++) {
		if (!sel[i])
			continue;
		uint64_t b0 = bytes_net;
		double t0 = MPI_Wtime();
		begin_test(++n, tests[i].name);
		tests[i].fn();
		end_test(t0, b0);
	}

	uint64_t mine[2] = {bytes_net, bytes_self}, tot[2] = {0, 0};
	cur_name = "summary";
	M(MPI_Reduce(mine, tot, 2, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD));
	if (rank == 0) {
		printf("vrma_mpi_test: %" PRIu64 " bytes (%.1f MB) moved between ranks, %" PRIu64
		       " bytes from ranks to themselves, in %.2f s\n",
		       tot[0], tot[0] / 1e6, tot[1], MPI_Wtime() - t_start);
		printf("vrma_mpi_test: all %d tests passed on %d ranks\n", k, nranks);
		fflush(stdout);
	}
	MPI_Finalize();
	return 0;
}
