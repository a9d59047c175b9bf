/*
 * vrma_mpi_osc: MPI-3 one-sided checks for vrma's RDM endpoint under Open
 * MPI's osc/rdma over btl/ofi (run-mpi.sh mode vrma-osc), also runnable over
 * any other transport.
 *
 * Each test uses a window of WIN int64 per rank (MPI_Win_allocate) and checks
 * every element it can predict, on every rank:
 *  - fence: MPI_Put to the right neighbour, MPI_Get from the left one,
 *    MPI_Accumulate (MPI_SUM) of every rank into rank 0, MPI_Get_accumulate
 *    (MPI_SUM) of every rank into rank 1 with the old values checked for
 *    being distinct partial sums;
 *  - lock/unlock (passive target): MPI_Fetch_and_op (MPI_SUM) (and, with
 *    -c, MPI_Compare_and_swap) increments of one counter on rank 0 by every
 *    other rank, MPI_Accumulate with MPI_MAX and MPI_BXOR, MPI_Put/MPI_Get
 *    under MPI_LOCK_EXCLUSIVE and MPI_LOCK_SHARED; a rank does not target
 *    its own window in this test;
 *  - PSCW: rank 0 exposes its window to the others (post/wait), which put
 *    and accumulate into it (start/complete).
 *
 * Output (TAP): "1..K", "ok N - name" or "not ok N - name: rank R: detail",
 * then "vrma_mpi_osc: all K tests passed on R ranks". A failure ends the job
 * through MPI_Abort.
 *
 * MPI_Compare_and_swap is exercised with -c only. Open MPI 4.1.4's osc/rdma
 * (Debian 12) tries the BTL's compare-and-swap before it checks whether the
 * target window is mapped locally; with every rank on one node all windows
 * of MPI_Win_allocate are (one shared memory segment), their BTL handle is
 * NULL, and the rank crashes in mca_btl_ofi_acswap reading
 * remote_handle->rkey, before libfabric is called (btl/vader crashes the
 * same way). run-mpi.sh's vrma-osc mode gives every rank a node of its own,
 * which is also what makes the other operations go through vrma at all;
 * the device suite runs it with -c. Over one node (mode shm, or mpirun by
 * hand) leave -c out. DEVELOPERS.md, "MPI one-sided".
 *
 * Build: mpicc -O2 -Wall -Wextra -Werror -o vrma_mpi_osc vrma_mpi_osc.c
 * Run:   test/mpi/run-mpi.sh ./vrma_mpi_osc vrma-osc -np 4 -- -c
 */
#include <mpi.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WIN 64
#define ROUNDS 20

static int rank, nranks, test_num;
static int with_cas; /* -c: MPI_Compare_and_swap too */
static const char *test_name = "setup";

static void fail(const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	printf("not ok %d - %s: rank %d: %s\n", test_num, test_name, rank, msg);
	fflush(stdout);
	MPI_Abort(MPI_COMM_WORLD, 1);
}

#define CHECK(cond, ...)                    \
	do {                                \
		if (!(cond))                \
			fail(__VA_ARGS__);  \
	} while (0)

#define MPI_OK(call)                                                      \
	do {                                                              \
		int rc_ = (call);                                         \
		if (rc_ != MPI_SUCCESS)                                   \
			fail("%s returned %d", #call, rc_);               \
	} while (0)

static void begin(const char *name)
{
	test_num++;
	test_name = name;
	MPI_Barrier(MPI_COMM_WORLD);
}

static void end(void)
{
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0) {
		printf("ok %d - %s\n", test_num, test_name);
		fflush(stdout);
	}
}

static int64_t *win_open(MPI_Win *win)
{
	int64_t *base = NULL;
	/* Asks for no shared-memory window, but no Open MPI 4.1.4 component
	 * reads the key: its osc/rdma maps the windows of all ranks on one
	 * node in shared memory and uses CPU loads, stores and atomics on
	 * them, so only ranks on other nodes go through the transport
	 * (run-mpi.sh's vrma-osc mode: one rank per node). */
	MPI_Info info;
	MPI_Info_create(&info);
	MPI_Info_set(info, "alloc_shm", "false");
	MPI_OK(MPI_Win_allocate(WIN * sizeof(int64_t), sizeof(int64_t), info, MPI_COMM_WORLD, &base, win));
	MPI_Info_free(&info);
	MPI_OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, *win));
	for (int i = 0; i < WIN; i++)
		base[i] = 0;
	MPI_OK(MPI_Win_unlock(rank, *win));
	MPI_Barrier(MPI_COMM_WORLD);
	return base;
}

static int64_t local_read(MPI_Win win, int64_t *base, int i)
{
	int64_t v;
	MPI_OK(MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win));
	v = base[i];
	MPI_OK(MPI_Win_unlock(rank, win));
	return v;
}

static void test_fence(void)
{
	begin("fence: put, get, accumulate, get_accumulate");
	MPI_Win win;
	int64_t *base = win_open(&win);
	const int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
	int64_t mine[8], got[8], old = -1;
	for (int i = 0; i < 8; i++)
		mine[i] = 1000 * rank + i;
	base[40] = 77 + rank; /* what the left neighbour's get reads */
	MPI_OK(MPI_Win_fence(0, win));
	MPI_OK(MPI_Put(mine, 8, MPI_INT64_T, right, 0, 8, MPI_INT64_T, win));
	MPI_OK(MPI_Get(got, 1, MPI_INT64_T, left, 40, 1, MPI_INT64_T, win));
	const int64_t add = rank + 1;
	MPI_OK(MPI_Accumulate(&add, 1, MPI_INT64_T, 0, 10, 1, MPI_INT64_T, MPI_SUM, win));
	MPI_OK(MPI_Get_accumulate(&add, 1, MPI_INT64_T, &old, 1, MPI_INT64_T, nranks > 1 ? 1 : 0, 11, 1,
				  MPI_INT64_T, MPI_SUM, win));
	MPI_OK(MPI_Win_fence(0, win));
	for (int i = 0; i < 8; i++)
		CHECK(base[i] == 1000 * left + i, "element %d is %" PRId64 ", expected %d", i, base[i],
		      1000 * left + i);
	CHECK(got[0] == 77 + left, "get from the left read %" PRId64, got[0]);
	const int64_t total = (int64_t)nranks * (nranks + 1) / 2;
	if (rank == 0)
		CHECK(base[10] == total, "accumulated %" PRId64 ", expected %" PRId64, base[10], total);
	if (rank == (nranks > 1 ? 1 : 0))
		CHECK(base[11] == total, "get_accumulated %" PRId64 ", expected %" PRId64, base[11], total);
	/* The old values are partial sums: distinct, each below the total. */
	CHECK(old >= 0 && old < total, "get_accumulate's old value %" PRId64, old);
	int64_t *olds = malloc(nranks * sizeof *olds);
	MPI_Allgather(&old, 1, MPI_INT64_T, olds, 1, MPI_INT64_T, MPI_COMM_WORLD);
	for (int i = 0; i < nranks; i++)
		for (int j = i + 1; j < nranks; j++)
			CHECK(olds[i] != olds[j], "ranks %d and %d got the same old value %" PRId64, i, j, olds[i]);
	free(olds);
	MPI_OK(MPI_Win_fence(0, win));
	MPI_Win_free(&win);
	end();
}

static void test_lock(void)
{
	begin(with_cas ? "lock/unlock: fetch_and_op, compare_and_swap, accumulate MAX/BXOR, put/get"
		       : "lock/unlock: fetch_and_op, accumulate MAX/BXOR, put/get");
	MPI_Win win;
	int64_t *base = win_open(&win);
	/* Fetch-and-add: every old value distinct. */
	int64_t one = 1, old = 0, seen_max = -1;
	const int rounds = rank == 0 ? 0 : ROUNDS;
	for (int r = 0; r < rounds; r++) {
		MPI_OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
		MPI_OK(MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 0, 0, MPI_SUM, win));
		MPI_OK(MPI_Win_unlock(0, win));
		CHECK(old > seen_max, "fetch_and_op went back: %" PRId64 " after %" PRId64, old, seen_max);
		seen_max = old;
	}
	/* Compare-and-swap increments until `rounds` succeeded (-c only: Open
	 * MPI 4.1.4's osc/rdma crashes in mca_btl_ofi_acswap, on the NULL
	 * handle of a window in its node's shared memory, before the operation
	 * reaches libfabric; see the top of the file). */
	int done = 0, tries = 0;
	int64_t guess = 0;
	while (with_cas && done < rounds) {
		int64_t want = guess + 1, got = -1;
		MPI_OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
		MPI_OK(MPI_Compare_and_swap(&want, &guess, &got, MPI_INT64_T, 0, 1, win));
		MPI_OK(MPI_Win_unlock(0, win));
		if (got == guess)
			done++;
		guess = got == guess ? guess + 1 : got;
		CHECK(++tries < 100000, "compare_and_swap never succeeds");
	}
	/* MAX and BXOR accumulate into rank 0. */
	const int64_t mx = 100 + rank, bx = (int64_t)1 << rank;
	if (rank != 0) {
		MPI_OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
		MPI_OK(MPI_Accumulate(&mx, 1, MPI_INT64_T, 0, 2, 1, MPI_INT64_T, MPI_MAX, win));
		MPI_OK(MPI_Accumulate(&bx, 1, MPI_INT64_T, 0, 3, 1, MPI_INT64_T, MPI_BXOR, win));
		MPI_OK(MPI_Win_unlock(0, win));
	}
	/* Exclusive put, shared get: rank r writes its row on every rank. */
	int64_t row[4] = {rank, rank * 2, rank * 3, -rank};
	for (int t = 0; t < nranks; t++) {
		if (t == rank)
			continue;
		MPI_OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t, 0, win));
		MPI_OK(MPI_Put(row, 4, MPI_INT64_T, t, 8 + 4 * rank, 4, MPI_INT64_T, win));
		MPI_OK(MPI_Win_unlock(t, win));
	}
	MPI_Barrier(MPI_COMM_WORLD);
	for (int t = 0; t < nranks; t++) {
		if (t == rank)
			continue;
		int64_t back[4 * 8] = {0};
		const int n = 4 * (nranks < 8 ? nranks : 8);
		MPI_OK(MPI_Win_lock(MPI_LOCK_SHARED, t, 0, win));
		MPI_OK(MPI_Get(back, n, MPI_INT64_T, t, 8, n, MPI_INT64_T, win));
		MPI_OK(MPI_Win_unlock(t, win));
		for (int r = 0; r < n / 4; r++)
			CHECK(r == t || (back[4 * r] == r && back[4 * r + 1] == 2 * r && back[4 * r + 2] == 3 * r &&
					 back[4 * r + 3] == -r),
			      "rank %d's row on rank %d is wrong", r, t);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0) {
		const int64_t n = nranks;
		CHECK(local_read(win, base, 0) == (n - 1) * ROUNDS, "fetch_and_op total %" PRId64 ", expected %" PRId64,
		      local_read(win, base, 0), (n - 1) * ROUNDS);
		if (with_cas)
			CHECK(local_read(win, base, 1) == (n - 1) * ROUNDS,
			      "compare_and_swap total %" PRId64 ", expected %" PRId64, local_read(win, base, 1),
			      (n - 1) * ROUNDS);
		if (n > 1) {
			CHECK(local_read(win, base, 2) == 100 + n - 1, "MAX gave %" PRId64, local_read(win, base, 2));
			CHECK(local_read(win, base, 3) == ((int64_t)1 << n) - 2, "BXOR gave %" PRId64,
			      local_read(win, base, 3));
		}
	}
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Win_free(&win);
	end();
}

static void test_pscw(void)
{
	begin("PSCW: post/start/complete/wait with put and accumulate");
	MPI_Win win;
	int64_t *base = win_open(&win);
	MPI_Group world, peers;
	MPI_Comm_group(MPI_COMM_WORLD, &world);
	if (rank == 0) {
		int *others = malloc(nranks * sizeof *others);
		for (int i = 1; i < nranks; i++)
			others[i - 1] = i;
		MPI_Group_incl(world, nranks - 1, others, &peers);
		free(others);
		if (nranks > 1) {
			MPI_OK(MPI_Win_post(peers, 0, win));
			MPI_OK(MPI_Win_wait(win));
		}
		for (int r = 1; r < nranks; r++)
			CHECK(base[r] == 500 + r, "rank %d's put gave %" PRId64, r, base[r]);
		const int64_t sum = (int64_t)(nranks - 1) * nranks / 2;
		CHECK(base[0] == sum * ROUNDS, "accumulated %" PRId64 ", expected %" PRId64, base[0], sum * ROUNDS);
		MPI_Group_free(&peers);
	} else {
		const int zero = 0;
		MPI_Group_incl(world, 1, &zero, &peers);
		MPI_OK(MPI_Win_start(peers, 0, win));
		const int64_t v = 500 + rank, add = rank;
		MPI_OK(MPI_Put(&v, 1, MPI_INT64_T, 0, rank, 1, MPI_INT64_T, win));
		for (int r = 0; r < ROUNDS; r++)
			MPI_OK(MPI_Accumulate(&add, 1, MPI_INT64_T, 0, 0, 1, MPI_INT64_T, MPI_SUM, win));
		MPI_OK(MPI_Win_complete(win));
		MPI_Group_free(&peers);
	}
	MPI_Group_free(&world);
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Win_free(&win);
	end();
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "-c"))
			with_cas = 1;
	alarm(300); /* a hang ends the job */
	if (rank == 0) {
		printf("1..3\n");
		fflush(stdout);
	}
	test_fence();
	test_lock();
	test_pscw();
	if (rank == 0)
		printf("vrma_mpi_osc: all %d tests passed on %d ranks\n", test_num, nranks);
	MPI_Finalize();
	return 0;
}
