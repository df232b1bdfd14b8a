/* The real node's test program: a Monte Carlo estimate of pi over all ranks. Every rank prints the
 * host it runs on, so a test can check placement from the program's own output.
 * Usage: pi [EXIT_CODE]   (a non-zero EXIT_CODE makes every rank fail after the reduction, for tests) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int rank = 0, size = 0, len = 0;
    char host[MPI_MAX_PROCESSOR_NAME] = {0};
    long long hits = 0, total = 0;
    const long long samples = 4000000;
    unsigned long long state = 0x9E3779B97F4A7C15ULL;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);
    printf("rank %d of %d on %s\n", rank, size, host);
    fflush(stdout);

    state ^= (unsigned long long)(rank + 1) * 0xBF58476D1CE4E5B9ULL;
    for (long long i = 0; i < samples; i++) {
        double xy[2];
        for (int k = 0; k < 2; k++) { /* xorshift64*: a different stream per rank */
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            xy[k] = (double)((state * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0;
        }
        if (xy[0] * xy[0] + xy[1] * xy[1] <= 1.0) hits++;
    }
    MPI_Reduce(&hits, &total, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("pi is approximately %.16f\n", 4.0 * (double)total / (double)(samples * size));
        fflush(stdout);
    }
    /* Everyone past the reduction before finalizing (cheap; Debian 12's MPICH 4.0.2 hung in finalize
     * with or without it, which is why the image uses PyPI's MPICH 5). */
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return argc > 1 ? atoi(argv[1]) : 0;
}
