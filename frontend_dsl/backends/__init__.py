"""Where a program's requests go: the in-process engine or a server over HTTP."""
