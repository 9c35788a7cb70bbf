"""The actor runtime the control plane and the node agent are built on."""
