#!/bin/bash
sleep 30
echo done > /app/result.txt
