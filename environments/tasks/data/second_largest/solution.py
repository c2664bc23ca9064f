def second_largest(numbers):
    distinct = sorted(set(numbers))
    return distinct[-2] if len(distinct) >= 2 else None
