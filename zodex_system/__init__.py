"""What the gateway and the worker both need from the operating system: the process tree,
session cgroups, private directories, XDG paths, secret files, and terminal text cleaning.
Imports neither."""
