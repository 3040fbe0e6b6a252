# A package whose tests cannot tell some bugs from no code at all: the
# values held in size, first and note are never used, so a bug in one of
# those lines that raises is fixed as well by deleting the line as by the
# real fix (actors/synth's deletion check rejects such candidates).


def total(items):
    size = len(items)
    first = items[0] if items else None
    result = sum(items)
    return result


def label(name, count):
    note = name.upper() if name else ""
    text = name + ":" + str(count)
    return text
