/* The L3 probe: every rank reports where it runs, then all ranks meet in a reduction,
 * so a run only succeeds when the ranks really talk to each other. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int rank = 0, size = 0, sum = 0, one = 1;
    char host[256] = {0}, lib[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
    int liblen = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gethostname(host, sizeof host - 1);
    MPI_Get_library_version(lib, &liblen);
    lib[strcspn(lib, "\r\n")] = 0; /* first line names the implementation actually loaded */
    if (rank == 0) printf("LIBRARY %s\n", lib);
    printf("RANK %d SIZE %d HOST %s\n", rank, size, host);
    fflush(stdout);
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("ALLREDUCE %d\n", sum);
    fflush(stdout);
    MPI_Finalize();
    return sum == size ? 0 : 3;
}
