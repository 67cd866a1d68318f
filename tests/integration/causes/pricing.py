"""For each request id given, the traceback of a pricing call the tax service refused, raised
from a wrapper as workers do; each followed by a line "----"."""
import sys
import traceback


class UpstreamRejected(Exception):
    pass


def quote(request_id):
    raise UpstreamRejected(f"request {request_id} rejected by the tax service")


def price(request_id):
    try:
        quote(request_id)
    except UpstreamRejected as e:
        raise RuntimeError("could not price the invoice") from e


for request_id in sys.argv[1:]:
    try:
        price(request_id)
    except Exception:
        print(traceback.format_exc(), end="")
        print("----")
