from sglang_lite.mem.kv_pool import KVPool, PageAllocator
from sglang_lite.mem.req_to_token import ReqToTokenPool

__all__ = ["KVPool", "PageAllocator", "ReqToTokenPool"]
