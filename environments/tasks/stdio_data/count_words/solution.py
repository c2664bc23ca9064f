import sys

print(len(sys.stdin.read().split()))
