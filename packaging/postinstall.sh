#!/bin/sh
# Post-install note: the package installs the unit but does not start the node, so
# the operator chooses its flags (exemptions, labels, backend) first.
cat <<'NOTE'
oz0-node is installed. The systemd unit runs: oz0-node run --data-dir /var/lib/oz0-node --plugin-sandbox strict
  - install bubblewrap (apt-get install bubblewrap) for tier-1 sandboxes; without a backend the node runs at tier 0 and says so
  - to check this machine: oz0-node doctor   (what the node needs here, and how to fix each miss)
  - to change flags: oz0-node service install [run flags…]   (replaces the unit)
  - to start:        systemctl enable --now oz0-node
  - to check:        oz0-node status; oz0-node findings
NOTE
exit 0
