"""Protocol limits shared by the parser and the command line (kept import-free for start-up)."""

#: A command line may hold at most this many bytes, counting its CRLF.
LINE_LIMIT = 224
#: Longest tube name.
MAX_NAME = 200
#: Default and largest ``-z`` value.
DEFAULT_MAX_JOB_SIZE = 65535
MAX_JOB_SIZE_CAP = 1073741824
