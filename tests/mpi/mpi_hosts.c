/* The L3 probe: every rank reports where it runs, then all ranks meet in a reduction,
 * so a run only succeeds when the ranks really talk to each other. */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int rank = 0, size = 0, sum = 0, one = 1;
    char host[256] = {0};
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gethostname(host, sizeof host - 1);
    printf("RANK %d SIZE %d HOST %s\n", rank, size, host);
    fflush(stdout);
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("ALLREDUCE %d\n", sum);
    fflush(stdout);
    MPI_Finalize();
    return sum == size ? 0 : 3;
}
