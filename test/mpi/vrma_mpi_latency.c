/* vrma_mpi_latency: MPI ping-pong latency between ranks 0 and 1 (an OSU-style
 * measurement for comparing transports, not a test): for each size, 1000
 * untimed round trips, then the median of 9 timed runs of 2000 round trips,
 * printed as half the round-trip time in microseconds. The payload is
 * checked (first and last byte) so a broken transport cannot look fast.
 * Usage: mpirun -np 2 vrma_mpi_latency [SIZE...] (default 8)
 * Exit status: 0, or 1 on a data mismatch or too few ranks. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kWarmup = 1000, kIters = 2000, kRuns = 9 };

static int cmp_double(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	int rank, size, bad = 0;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size < 2) {
		if (rank == 0)
			fprintf(stderr, "vrma_mpi_latency: needs 2 ranks\n");
		MPI_Finalize();
		return 1;
	}
	int nsizes = argc > 1 ? argc - 1 : 1;
	for (int s = 0; s < nsizes; s++) {
		const size_t len = argc > 1 ? strtoull(argv[s + 1], NULL, 0) : 8;
		unsigned char *buf = malloc(len ? len : 1);
		double runs[kRuns];
		for (int r = -1; r < kRuns; r++) {
			const int iters = r < 0 ? kWarmup : kIters;
			MPI_Barrier(MPI_COMM_WORLD);
			const double t0 = MPI_Wtime();
			for (int i = 0; i < iters && rank < 2; i++) {
				const unsigned char v = (unsigned char)(i * 7 + r);
				if (rank == 0) {
					if (len) {
						buf[0] = v;
						buf[len - 1] = v;
					}
					MPI_Send(buf, (int)len, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
					MPI_Recv(buf, (int)len, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				} else {
					MPI_Recv(buf, (int)len, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
					MPI_Send(buf, (int)len, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
				}
				if (len && (buf[0] != v || buf[len - 1] != v))
					bad = 1;
			}
			if (r >= 0)
				runs[r] = (MPI_Wtime() - t0) * 1e6 / (2.0 * iters);
		}
		qsort(runs, kRuns, sizeof runs[0], cmp_double);
		if (rank == 0)
			printf("%zu bytes: %.2f us (median of %d runs; min %.2f, max %.2f)\n", len,
			       runs[kRuns / 2], kRuns, runs[0], runs[kRuns - 1]);
		free(buf);
	}
	int any_bad = 0;
	MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (any_bad && rank == 0)
		fprintf(stderr, "vrma_mpi_latency: data mismatch\n");
	MPI_Finalize();
	return any_bad ? 1 : 0;
}
