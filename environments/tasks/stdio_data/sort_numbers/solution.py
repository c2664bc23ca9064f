input()
print(*sorted(int(x) for x in input().split()))
