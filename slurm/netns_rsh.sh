#!/bin/sh
# mpirun's rsh agent for the hosts of local_hosts.sh: `netns_rsh.sh HOST COMMAND...` runs the
# command in namespace $MT_NETNS_PREFIX-HOST under hostname HOST (own UTS namespace). Without its
# own hostname, Open MPI would take two "hosts" for one and let their ranks share memory that the
# namespaces do not share.
host=$1
shift
exec ip netns exec "${MT_NETNS_PREFIX:?set MT_NETNS_PREFIX}-$host" unshare --uts /bin/sh -c "hostname $host; $*"
