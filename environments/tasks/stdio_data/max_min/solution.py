input()
xs = [int(x) for x in input().split()]
print(max(xs), min(xs))
