# Run in a chroot of the debootstrap tree: what every MPI image shares (upstream's base image behaviour):
# ssh client and server on port 2222 without host key checks, and the non-root user mpiuser whose own
# sshd config (~/.sshd_config) uses the key the operator mounts at ~/.ssh.
set -eu
port=2222
printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d   # never start services while installing
chmod 755 /usr/sbin/policy-rc.d
mkdir -p /run/sshd
cat >>/etc/ssh/ssh_config <<CFG
Host *
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    Port $port
CFG
sed -i -e "s/^#\?Port .*/Port $port/" -e "s/^#\?StrictModes .*/StrictModes no/" /etc/ssh/sshd_config
grep -q "^Port $port" /etc/ssh/sshd_config
useradd --create-home --uid 1000 --shell /bin/bash mpiuser
cat >/home/mpiuser/.sshd_config <<CFG
Port $port
PidFile /home/mpiuser/sshd.pid
HostKey /home/mpiuser/.ssh/id_rsa
StrictModes no
CFG
chown mpiuser:mpiuser /home/mpiuser/.sshd_config
rm -f /etc/resolv.conf /etc/hostname
apt-get clean
rm -rf /var/lib/apt/lists/* /var/log/*.log /var/log/apt/*
