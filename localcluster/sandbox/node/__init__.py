"""One real node: its configuration, its PID 1, the image store its containerd starts from, and the
set of nodes a sandbox runs."""
