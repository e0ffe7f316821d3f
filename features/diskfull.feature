Feature: Pruning on a full disk
  In order to go on working when the store's disk fills up
  As an agent runtime whose agent rewrites large files at every step
  I want pruning old checkpoints to give back the space of the copies no
  kept checkpoint shows, also when the sandbox's writes already fail

  Background:
    Given the store is on a file system of 96 MiB
    And a base directory with these files:
      | path      | content |
      | README.md | hello   |
    And a sandbox "work" over the base
    And the sandbox "work" is mounted

  Scenario: A prune frees the old copies of a rewritten file
    When I rewrite 10 MiB of random bytes in "big.bin" and checkpoint "work" until the store is full
    And I prune "work" keeping the last 1 checkpoint
    Then the collection gave back at least 40 MiB
    When I write 10240 KiB of random bytes to "more.bin" in the mount
    Then "more.bin" in the mount holds the bytes written last
    And every checkpoint of "work" verifies
    And fsck finds no problem
    When I remount the sandbox "work"
    Then "more.bin" in the mount holds the bytes written last
    And "README.md" in the mount contains "hello"
