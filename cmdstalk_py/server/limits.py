"""Protocol limits shared by the parser and the command line (kept import-light for start-up)."""

from cmdstalk_py.client.names import MAX_TUBE_NAME

#: A command line may hold at most this many bytes, counting its CRLF.
LINE_LIMIT = 224
#: Longest tube name (the project's one tube-name rule).
MAX_NAME = MAX_TUBE_NAME
#: Default and largest ``-z`` value.
DEFAULT_MAX_JOB_SIZE = 65535
MAX_JOB_SIZE_CAP = 1073741824
