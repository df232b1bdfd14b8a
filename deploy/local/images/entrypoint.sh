#!/bin/sh
# Entrypoint of the MPICH and Intel MPI images. On the launcher, first wait until its own name and every
# host of the hostfile resolve (cluster DNS lists a worker a moment after its pod starts), then run the
# command as given.
if [ "$K_MPI_JOB_ROLE" = launcher ] && [ -r /etc/mpi/hostfile ]; then
  for host in "$(hostname)" $(sed -e 's/[:[:space:]].*//' /etc/mpi/hostfile); do
    tries=0
    until getent hosts "$host" >/dev/null; do
      tries=$((tries + 1))
      if [ "$tries" -ge 100 ]; then
        echo "entrypoint: $host still does not resolve, going on" >&2
        break
      fi
      sleep 0.2
    done
  done
fi
exec "$@"
