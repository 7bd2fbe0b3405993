"""Running a few lines of Python inside a process rtdebug did not start: ``rtdebug adopt`` and its detach.

It runs in the shell (``rtdebug adopt``) and in ``rtdebug stop`` (``views.teardown`` detaches an adopted
session). ``runner`` chooses the method and runs the code in every rank of a job, each with the GIL held:
``ptrace_call`` (x86_64: a held thread makes only short calls that never wait on the GIL) over
``ptrace`` (the system calls and the thread's registers) and ``elfsyms`` (CPython's entry points from
the ELF symbol tables), or ``gdb`` elsewhere; ``exchange`` is the private 0700 directory in the owner's
registry through which requests and answers pass (nothing is written through a path another user could
prepare); ``sigdefer`` holds SIGINT/SIGHUP/SIGTERM back while a thread is held; ``jobs`` finds a job's
ranks from the process tree and ``/proc/<pid>/environ``. Imports ``rtdebug.common`` only.
"""
