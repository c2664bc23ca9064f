input()
total = 0
out = []
for x in input().split():
    total += int(x)
    out.append(total)
print(*out)
