input()
print(len(set(input().split())))
