"""A consumer whose tax lookup fails, re-raised as a processing error."""
import sys


class ProcessingError(Exception):
    pass


def tax_of(invoice):
    return invoice["vat_id"]


def handle(number):
    invoice = {"number": number}
    try:
        return tax_of(invoice)
    except KeyError as e:
        raise ProcessingError(f"invoice {number} could not be taxed") from e


handle(sys.argv[1])
