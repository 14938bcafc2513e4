"""Jobs on this machine: the local backend (``backend``), the detached runner it starts
(``worker``, run by ``localrun``) and the stand-in for Kueue's quota (``queue``)."""
